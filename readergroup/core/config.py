"""Client configuration shared by managers, writers and readers (frozen, validated)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from readergroup.core.errors import (
    InvalidConfigError,
    UnsafeServerConfigError,
    UnsupportedServerError,
)
from statesync import Acks, RetryPolicy
from statesync.errors import StateSyncError
from statesync.names import validate_name as validate_key_prefix
from statesync.redaction import redacted_repr


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientConfig:
    """How a client talks to Redis.

    Attributes:
        key_prefix: first part of every key this library writes (default ``"rg"``).
        socket_timeout: seconds a Redis command may take (default 10.0; > 0).
        retry: bound on retries after conflicts or Redis outages (default
            ``RetryPolicy()``: 64 attempts within 30 s, jittered exponential backoff).
        metadata_ttl: seconds a writer or reader trusts cached stream metadata before it
            re-reads it (default 5.0; >= 0). Sealed-segment errors refresh it at once.
        redis_options: extra keyword arguments for ``redis.Redis.from_url``: TLS files
            (``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``), ``username``/``password``
            for ACL users, and so on (default none).
        cluster: the URL names one node of a Redis Cluster (default False). Every script runs
            in one hash slot; readers then read each slot separately (docs/reference/limits.md).
        acks: when a writer's events and a state-log append count as acknowledged, like
            Kafka's ``acks``: ``"leader"`` (default: the primary has them), ``"replicas=N"``
            (``WAIT N``: N replicas have them) or ``"fsync"`` (``WAITAOF``: the primary's
            append-only file has them on disk; Redis/Valkey 7.2+ with ``appendonly yes``).
        ack_timeout: seconds one acknowledgement wait may take before the append is retried
            (default 5.0; > 0); the writer's ``delivery_timeout`` bounds the retries.
        sentinel_options: keyword arguments for the connections to the Sentinels of a
            ``redis+sentinel://`` URL, for example their own ``password`` (default none;
            ``redis_options`` go to the primary's connections).

    URLs: ``redis://``, ``rediss://``, ``unix://``, ``redis+sentinel://[user:pass@]host:port
    [,host:port...]/service_name[/db]`` (the primary the Sentinels name, followed across
    failovers), and for a cluster ``redis://host:port[,host:port...]`` (several seeds).
        allow_key_eviction: accept a server whose ``maxmemory-policy`` may evict keys without
            a TTL (``allkeys-*``). Default False: every new connection checks the policy and
            such a server is refused with :class:`UnsafeServerConfigError`, since evicted
            catalog, group or segment keys lose acknowledged events and whole streams.
        compact_every: the client whose write to a state log (a reader group's, a catalog,
            stream metadata) lands at a multiple of this revision writes a snapshot and trims
            the log behind the previous one, so a log holds at most about twice this many
            entries however many readers come and go (default 1000; 10 to 10,000,000).
    """

    key_prefix: str = "rg"
    socket_timeout: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    metadata_ttl: float = 5.0
    redis_options: Mapping[str, Any] = field(default_factory=dict)
    cluster: bool = False
    acks: str = "leader"
    ack_timeout: float = 5.0
    sentinel_options: Mapping[str, Any] = field(default_factory=dict)
    allow_key_eviction: bool = False
    compact_every: int = 1000

    def __repr__(self) -> str:
        return redacted_repr(self)  # no password of redis_options or sentinel_options

    def __post_init__(self) -> None:
        try:
            validate_key_prefix(self.key_prefix, what="key prefix")
        except StateSyncError as exc:
            raise InvalidConfigError(str(exc)) from exc
        if not self.socket_timeout > 0:
            raise InvalidConfigError(f"socket_timeout must be > 0, got {self.socket_timeout}")
        if not isinstance(self.retry, RetryPolicy):
            raise InvalidConfigError("retry must be a statesync.RetryPolicy")
        try:
            Acks.parse(self.acks, timeout=self.ack_timeout)
        except StateSyncError as exc:
            raise InvalidConfigError(str(exc)) from exc
        if not self.metadata_ttl >= 0:
            raise InvalidConfigError(f"metadata_ttl must be >= 0, got {self.metadata_ttl}")
        if not 10 <= self.compact_every <= 10_000_000:
            raise InvalidConfigError(
                f"compact_every must be 10..10000000, got {self.compact_every}"
            )

    @property
    def durability(self) -> Acks:
        """``acks`` and ``ack_timeout`` as a :class:`statesync.Acks`."""
        return Acks.parse(self.acks, timeout=self.ack_timeout)


def check_eviction_policy(policy: str) -> None:
    """Refuse a ``maxmemory-policy`` that may evict keys without a TTL (every key of this
    library but the Spark sink's staging lists): ``allkeys-lru``, ``allkeys-lfu``,
    ``allkeys-random``. ``noeviction`` and the ``volatile-*`` policies are accepted.

    >>> check_eviction_policy("noeviction")
    >>> check_eviction_policy("allkeys-lru")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    readergroup.core.errors.UnsafeServerConfigError: ...
    """
    if policy.startswith("allkeys-"):
        raise UnsafeServerConfigError(
            f"the Redis server's maxmemory-policy is {policy}: it may evict this library's keys "
            "(catalog, groups, segments) and lose acknowledged events; set maxmemory-policy "
            "noeviction, or opt out with ClientConfig(allow_key_eviction=True)"
        )


OLDEST_SERVER = (7, 0)
"""The oldest Redis this library supports: the generated ACL rules use read-only key patterns
(``%R~``) and selectors, and read-only scripts run with ``EVALSHA_RO`` (all Redis 7.0). Valkey
numbers its releases from 7.2 on, so every Valkey qualifies."""


def server_version(reply: Any) -> tuple[str, str]:
    """``(server, version)`` from the reply to ``HELLO`` without arguments: a flat list of
    names and values (RESP2) or a map (RESP3), names and values as bytes or text.

    >>> server_version([b"server", b"redis", b"version", b"6.2.14", b"proto", 2])
    ('redis', '6.2.14')
    >>> server_version({"server": "valkey", "version": "8.1.8"})
    ('valkey', '8.1.8')
    """
    pairs = (
        reply.items() if isinstance(reply, Mapping) else zip(reply[::2], reply[1::2], strict=False)
    )
    fields = {_text(name): value for name, value in pairs}
    return _text(fields.get("server", "redis")), _text(fields.get("version", ""))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def check_server_version(server: str, version: str) -> None:
    """Refuse a server older than :data:`OLDEST_SERVER` (or one whose version cannot be read)
    with :class:`UnsupportedServerError` naming its version and the oldest supported.

    >>> check_server_version("redis", "7.0.15")
    >>> check_server_version("valkey", "8.1.8")
    >>> check_server_version("redis", "6.2.14")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    readergroup.core.errors.UnsupportedServerError: the server is redis 6.2.14; readergroup ...
    """
    numbers = version.split(".")[:2]
    try:
        parsed = tuple(int(n) for n in numbers)
    except ValueError:
        parsed = ()
    if len(parsed) == 2 and parsed >= OLDEST_SERVER:
        return
    oldest = ".".join(map(str, OLDEST_SERVER))
    found = f"{server} {version}" if parsed else f"{server} of unknown version {version!r}"
    raise UnsupportedServerError(
        f"the server is {found}; readergroup needs Redis {oldest} or later (or any Valkey): "
        "upgrade the server"
    )
