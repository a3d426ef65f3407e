"""The Redis connection of readergroup: :class:`RedisConnection` parses the URL (one server, a
cluster's seeds, or ``redis+sentinel://``), builds the clients (redis-py's own retries off;
the server's version and ``maxmemory-policy`` checked on every new socket), loads the Lua
scripts, and composes the stores that do the I/O:
:class:`~readergroup.storage.segment_store.SegmentStore` (``segments``),
:class:`~readergroup.storage.staging_store.StagingStore` (``staging``),
:class:`~readergroup.storage.subscriber_store.SubscriberStore` (``subscribers``),
:class:`~readergroup.storage.heartbeat_store.RedisHeartbeatStore` (:meth:`heartbeat_store`),
state synchronizers (:meth:`synchronizer`) and blocking reads over many keys
(:meth:`read_keys`). Every key comes from its :class:`~readergroup.storage.keys.KeyLayout`
(``keys``); errors are translated by :mod:`readergroup.storage.translate`."""

from __future__ import annotations

import functools
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from readergroup.core.config import (
    OLDEST_SERVER,
    ClientConfig,
    check_eviction_policy,
    check_server_version,
    server_version,
)
from readergroup.core.errors import (
    AccessDeniedError,
    InvalidConfigError,
    ReaderGroupError,
    UnsupportedServerError,
)
from readergroup.core.steps import StepDriver
from readergroup.storage.connection_api import SynchronizerSource
from readergroup.storage.heartbeat_store import RedisHeartbeatStore
from readergroup.storage.keys import KeyLayout
from readergroup.storage.multi_read import BLOCKING_READ_SOCKET_TIMEOUT, MultiKeyReader
from readergroup.storage.scripts import SCRIPT_NAMES, script_source
from readergroup.storage.segment_store import SegmentStore
from readergroup.storage.staging_store import StagingStore
from readergroup.storage.subscriber_store import SubscriberStore
from readergroup.storage.translate import translate_errors
from readergroup.storage.txn_store import TxnStore
from statesync import SyncConfig
from statesync.endpoints import is_sentinel_url, split_seeds
from statesync.errors import EndpointURLError
from statesync.redaction import redact, redact_url
from statesync.redis_backend import (
    PrimarySwitches,
    RedisLogBackend,
    primary_switches,
    sentinel_clients,
)

if TYPE_CHECKING:
    from readergroup.storage.connection_api import Connection
    from readergroup.storage.read_ahead import ReadAhead


def _raw_reply(response: Any, **options: Any) -> Any:
    return response


def _connect_checking_server(connection: Any) -> None:
    """redis-py's ``redis_connect_func``: set up a new socket as usual, then check the server."""
    _set_up(connection)
    _check_server(connection)


def _connect_checking_version(connection: Any) -> None:
    """The same without the eviction check (``ClientConfig(allow_key_eviction=True)``)."""
    _set_up(connection)
    _check_server(connection, eviction=False)


def _set_up(connection: Any) -> None:
    """redis-py's own set-up of a socket (``HELLO 3`` first, by default), a server without
    ``HELLO`` refused as too old."""
    try:
        connection.on_connect()
    except redis.exceptions.NoPermissionError:
        raise
    except redis.ResponseError as exc:
        if "hello" not in str(exc).lower():
            raise
        connection.disconnect()
        raise too_old_for_hello(exc) from exc


def _check_server(connection: Any, *, eviction: bool = True) -> None:
    """On a new socket (so checked again after every reconnect, to a restarted or failed-over
    server too): refuse a server older than Redis 7.0 (the version in the reply to the
    ``HELLO`` redis-py sent on connect, else to one sent here) and, with ``eviction``, one whose
    ``maxmemory-policy`` may evict keys (``INFO memory``); at most one round trip. RedisCluster
    calls it after its own set-up of the socket."""
    hello = getattr(connection, "handshake_metadata", None)
    driver = StepDriver(server_check(hello, eviction=eviction))
    while (step := driver.next()) is not None:
        try:
            if step is READ:
                driver.reply = connection.read_response()
            elif step is DISCONNECT:
                connection.disconnect()
            else:
                connection.send_command(*step)
        except redis.RedisError as exc:
            driver.error = exc


READ: tuple[str, ...] = ("read a reply",)
"""A step of :func:`server_check`: read the next reply."""
DISCONNECT: tuple[str, ...] = ("disconnect",)
"""A step of :func:`server_check`: drop the socket."""


def server_check(hello: Any, *, eviction: bool) -> Generator[tuple[str, ...], Any, None]:
    """The check of a new socket as steps (:class:`~readergroup.core.steps.StepDriver`; the
    threaded and the asyncio connection drive them): a command to send, :data:`READ` or
    :data:`DISCONNECT`. ``hello``: what redis-py's own ``HELLO`` on connect answered
    (``None``: not known, one is sent)."""
    asked = "HELLO" if hello is None else "INFO"
    try:
        if hello is None:
            yield ("HELLO",)
        if eviction:
            yield ("INFO", "memory")
        if hello is None:
            try:
                hello = yield READ
            except redis.exceptions.NoPermissionError:
                raise
            except redis.ResponseError as exc:
                raise too_old_for_hello(exc) from exc
        check_server_version(*server_version(hello))
        if eviction:
            asked = "INFO"
            check_memory_info((yield READ))
    except redis.exceptions.NoPermissionError as exc:
        yield DISCONNECT
        raise check_denied(asked, exc) from exc
    except ReaderGroupError:
        yield DISCONNECT  # never leave an unchecked socket in the pool
        raise


def url_options(
    url: str, config: ClientConfig
) -> tuple[dict[str, Any], bool, str, list[tuple[str, int]]]:
    """The client options for ``url`` and ``config`` (the threaded and the asyncio
    connection's alike), whether it names Sentinels, the URL of its first host and its seeds
    (several: a cluster's)."""
    options: dict[str, Any] = {
        "socket_connect_timeout": min(config.socket_timeout, 5.0),
        **dict(config.redis_options),
    }
    try:
        sentinel = is_sentinel_url(url)
        first, seeds = (url, []) if sentinel else split_seeds(url)
    except EndpointURLError as exc:
        raise InvalidConfigError(str(exc)) from exc
    if sentinel and config.cluster:
        raise InvalidConfigError("a redis+sentinel:// URL cannot name a cluster")
    # No CLIENT SETINFO on connect (redis-py's default): two round trips fewer per new
    # socket, no metadata lookup of redis-py's version for each, and one set of ACL rules
    # for every server (Redis 7.0 has no CLIENT SETINFO; 7.2+ would log a denial)
    options.setdefault("driver_info", None)
    return options, sentinel, first, seeds


def unusable_url(url: str, config: ClientConfig, exc: Exception) -> InvalidConfigError:
    """redis-py refused ``url`` (a bad scheme, port or option): said without its password."""
    return InvalidConfigError(
        f"{redact_url(url)!r} is not a usable Redis URL: "
        f"{redact(str(exc), [config.redis_options.get('password')])}"
    )


def check_memory_info(info: Any) -> None:
    """Refuse a server whose ``maxmemory-policy`` (in an ``INFO memory`` reply) may evict."""
    if isinstance(info, bytes):
        info = info.decode("utf-8", "replace")
    for line in str(info).splitlines():
        name, _, value = line.partition(":")
        if name == "maxmemory_policy":
            check_eviction_policy(value.strip())


def check_denied(asked: str, exc: Exception) -> AccessDeniedError:
    """The error for an ACL user that may not run ``asked`` (``HELLO`` or ``INFO``), which
    checking a new socket's server needs."""
    needed = (
        "+hello, needed to check the server's version"
        if asked == "HELLO"
        else "+info, needed to check its maxmemory-policy (or opt out with "
        "ClientConfig(allow_key_eviction=True))"
    )
    return AccessDeniedError(f"Redis refused {asked} ({exc}): grant the ACL user {needed}")


def too_old_for_hello(exc: Exception) -> UnsupportedServerError:
    """No ``HELLO`` (Redis 5), or none without arguments (6.0)."""
    return UnsupportedServerError(
        f"the server does not answer HELLO ({exc}): it is older than Redis 6.2; readergroup "
        f"needs Redis {'.'.join(map(str, OLDEST_SERVER))} or later (or any Valkey)"
    )


class RedisConnection(SynchronizerSource):
    """One Redis client (and its pool) shared by everything a factory or manager creates.

    Thread-safe. redis-py's own retries are off: appends are retried one level up with the
    same sequence number, which the scripts deduplicate.
    """

    log_backend: RedisLogBackend

    def __init__(
        self, client: redis.Redis, config: ClientConfig, blocking_client: redis.Redis | None = None
    ) -> None:
        self.config = config
        self.client = client
        self.cluster = config.cluster
        self.keys = KeyLayout(config.key_prefix)
        acks = config.durability
        self.log_backend = RedisLogBackend(
            client,
            key_prefix=config.key_prefix,
            blocking_client=blocking_client,
            acks=acks,
        )
        # events are parsed by parse_event from the raw reply: skip redis-py's dict building
        for command_client in (client, self.log_backend.blocking_client):
            command_client.set_response_callback("XRANGE", _raw_reply)
            command_client.set_response_callback("XREAD", _raw_reply)
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }
        if self.cluster:  # pipelines cannot reload a script a node lost: load them everywhere
            with translate_errors("load scripts"):
                for name in SCRIPT_NAMES:
                    client.script_load(script_source(name))
        self._sync_config = SyncConfig(
            key_prefix=config.key_prefix,
            retry=config.retry,
            socket_timeout=config.socket_timeout,
            compact_every=config.compact_every,
            acks=acks,
        )
        switches = {
            id(counted): counted
            for counted in map(primary_switches, (client, self.log_backend.blocking_client))
            if counted is not None
        }  # (a Sentinel pair shares one count)
        self._switches: tuple[PrimarySwitches, ...] = tuple(switches.values())
        self._reads = MultiKeyReader(client, self.log_backend.blocking_client, self.cluster)
        self.segments = SegmentStore(
            client, self._scripts, self.keys, acks, self.cluster, self._reads
        )
        """The segment data plane."""
        self.staging = StagingStore(client, self._scripts, self.keys)
        """The Spark sink's staged writes."""
        self.records = client
        """The created-records of :mod:`readergroup.storage.vanished` (hashes)."""
        self.subscribers = SubscriberStore(client, self.keys)
        """External retention subscribers' published cuts."""

    @classmethod
    def from_url(cls, url: str, config: ClientConfig | None = None) -> RedisConnection:
        config = config or ClientConfig()
        options, sentinel, first, seeds = url_options(url, config)
        if config.cluster:  # (RedisCluster sets a socket up itself, then calls this)
            options["redis_connect_func"] = functools.partial(
                _check_server, eviction=not config.allow_key_eviction
            )
        else:
            options["redis_connect_func"] = (
                _connect_checking_version if config.allow_key_eviction else _connect_checking_server
            )
        try:
            with translate_errors("connect"):
                client, blocking = _clients(url, config, options, sentinel, first, seeds)
        except ReaderGroupError:
            raise
        except ValueError as exc:  # redis-py's URL parsing: a bad scheme, port or option
            raise unusable_url(url, config, exc) from exc
        return cls(client, config, blocking)

    def server_time_ms(self) -> int:
        with translate_errors("TIME"):
            return self.log_backend.server_time_ms()

    def primary_switches(self) -> int:
        """The switches the command and blocking clients have seen (see
        :func:`statesync.redis_backend.primary_switches`; a plain client's are always 0)."""
        return sum(switches.count for switches in self._switches)

    def forget_stream(self, scope: str, stream: str) -> None:
        """See :meth:`~readergroup.storage.connection_api.Connection.forget_stream`."""
        self.subscribers.delete(scope, stream)
        self.staging.forget_jobs(scope, stream)
        self.transactions(scope, stream).delete_all()

    def close(self) -> None:
        self.log_backend.close()

    def transactions(self, scope: str, stream: str) -> TxnStore:
        """The transactions of ``scope/stream`` (:mod:`readergroup.core.transactions`)."""
        return TxnStore(self.client, self.keys, scope, stream)

    def heartbeat_store(self, sync_name: str) -> RedisHeartbeatStore:
        """The heartbeats of the reader group whose synchronizer is ``sync_name``."""
        return RedisHeartbeatStore(self.client, self._scripts, self.keys, sync_name)

    def wake_on(
        self, sync_name: str, after_revision: int, *, wakes_only: bool = False
    ) -> tuple[str, str]:
        """The key and entry id a :meth:`read_keys` waits on to wake when the synchronizer
        ``sync_name`` has a revision after ``after_revision`` (``-1``: any); see
        :meth:`statesync.redis_backend.RedisLogBackend.wake_on`."""
        return self.log_backend.wake_on(sync_name, after_revision, wakes_only=wakes_only)

    def follower_wake_on(
        self, sync_name: str, after_revision: int, follower: str
    ) -> tuple[str, str]:
        """The key and entry id a :meth:`read_keys` waits on to wake when an entry of the
        synchronizer ``sync_name`` after ``after_revision`` names ``follower`` in its wake-up;
        see :meth:`statesync.redis_backend.RedisLogBackend.follower_wake_on`."""
        return self.log_backend.follower_wake_on(sync_name, after_revision, follower)

    def read_ahead(
        self, positions: Mapping[str, str], limit: int, *, block: float | None = None
    ) -> ReadAhead:
        """Send an ``XREAD`` (``block``: ``XREAD BLOCK``) of ``positions`` now; its reply is
        read later (see :class:`~readergroup.storage.read_ahead.ReadAhead`)."""
        from readergroup.storage.read_ahead import ReadAhead

        return ReadAhead(
            self.log_backend.blocking_client.connection_pool, positions, limit, block=block
        )

    def read_keys(self, positions: Mapping[str, str], timeout: float, limit: int) -> dict[str, Any]:
        """``XREAD BLOCK`` over stream keys (segments and state logs) in one call: key -> raw
        entries for the keys that had something (see :class:`MultiKeyReader`)."""
        return self._reads.read_keys(positions, timeout, limit)


def _clients(
    url: str,
    config: ClientConfig,
    options: dict[str, Any],
    sentinel: bool,
    first: str,
    seeds: list[tuple[str, int]],
) -> tuple[redis.Redis, redis.Redis | None]:
    """The command client and, for a Sentinel or a cluster, the blocking-read client."""
    if sentinel:
        try:
            return sentinel_clients(
                url,
                socket_timeout=config.socket_timeout,
                blocking_socket_timeout=BLOCKING_READ_SOCKET_TIMEOUT,
                sentinel_options=dict(config.sentinel_options),
                retry=Retry(NoBackoff(), 0),
                **options,
            )
        except EndpointURLError as exc:
            raise InvalidConfigError(str(exc)) from exc
    if config.cluster:
        from redis.cluster import ClusterNode

        from readergroup.storage.cluster_client import ClusterClient

        nodes = [
            ClusterNode(host, port)  # type: ignore[no-untyped-call]
            for host, port in seeds
        ]
        cluster = ClusterClient.from_url(
            first, startup_nodes=nodes, socket_timeout=config.socket_timeout, **options
        )
        cluster_blocking = ClusterClient.from_url(
            first, startup_nodes=nodes, socket_timeout=BLOCKING_READ_SOCKET_TIMEOUT, **options
        )
        return cluster, cluster_blocking  # type: ignore[return-value]
    if len(seeds) > 1:
        raise InvalidConfigError(
            f"{len(seeds)} hosts in the URL: several seeds need ClientConfig(cluster=True)"
        )
    client = redis.Redis.from_url(
        url, socket_timeout=config.socket_timeout, retry=Retry(NoBackoff(), 0), **options
    )
    return client, None


def _conforms(connection: RedisConnection) -> Connection:
    """mypy checks here that the Redis connection has the interface the clients use."""
    return connection
