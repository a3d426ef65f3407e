"""The Redis backends' wire format: the keys and arguments of each script call, and how its
reply reads. Pure functions, shared by :class:`~statesync.redis_backend.RedisLogBackend`
(blocking redis-py) and :class:`~statesync.aio_redis_backend.AsyncRedisLogBackend`
(``redis.asyncio``), so a threaded and an asyncio client of one log speak the same protocol.

A call is a :class:`ScriptCall`: the script's name (:data:`statesync.scripts.SCRIPT_NAMES`),
its KEYS and its ARGV, in the order the script's header contract gives.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from statesync import status
from statesync.backend import AppendOutcome, CompactOutcome, RawEntry, ReadResult
from statesync.durability import Acks
from statesync.errors import BackendProtocolError
from statesync.names import KeyLayout, validate_name

C = TypeVar("C")

MAX_BLOCK_MS = 5_000
"""Longest single ``XREAD BLOCK`` (ms) of a synchronizer's wait; longer waits loop over chunks
so a dead server is noticed."""
MAX_PARKED_BLOCK_MS = 10_000
"""Longest ``XREAD BLOCK`` (ms) any client of a blocking pool sends: an idle asyncio reader's
parked read (:data:`readergroup.storage.multi_read.MAX_PARKED_BLOCK_SECONDS`)."""
BLOCKING_SOCKET_MARGIN = 5.0
"""Seconds a blocking client's socket timeout exceeds the longest block it sends."""
BLOCKING_SOCKET_TIMEOUT = max(MAX_BLOCK_MS, MAX_PARKED_BLOCK_MS) / 1000 + BLOCKING_SOCKET_MARGIN
FOLLOWER_WAKE_TTL_MS = 600_000
"""A follower's wake stream expires this long after the newest wake-up naming it (a follower
reading it later misses nothing it needs: it refreshes on its own too)."""
LAST_SEQUENCE = 2**64 - 1
"""The largest sequence part of a stream entry id: waiting after ``<revision>-LAST_SEQUENCE``
skips every wake-up of that revision."""


class RedisBackendBase(Generic[C]):
    """What both Redis backends hold: the key prefix and layouts, the command client ``C``
    and the blocking one (``XREAD BLOCK`` on a pool of its own)."""

    def __init__(
        self,
        client: C,
        *,
        key_prefix: str = "statesync",
        blocking_client: C | None = None,
        acks: Acks | None = None,
    ) -> None:
        self._prefix = validate_name(key_prefix, what="key prefix")
        self._client = client
        self._blocking = self._blocking_twin(client) if blocking_client is None else blocking_client
        self._acks = acks or Acks()
        self._layouts: dict[str, KeyLayout] = {}

    def _blocking_twin(self, client: C) -> C:
        """A client on ``client``'s server, with its own pool of sockets that outlast a block."""
        raise NotImplementedError

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        key_prefix: str = "statesync",
        socket_timeout: float = 10.0,
        acks: Acks | None = None,
        **redis_kwargs: Any,
    ) -> Self:
        """Connect to ``url`` (``redis://``, ``rediss://``, ``unix://`` or
        ``redis+sentinel://``, see :mod:`statesync.endpoints`); ``redis_kwargs`` go to the
        Redis client (``username``, ``password``, ``ssl_*`` files...)."""
        client, blocking = cls._connect(url, socket_timeout, redis_kwargs)
        return cls(client, key_prefix=key_prefix, blocking_client=blocking, acks=acks)

    @classmethod
    def _connect(
        cls, url: str, socket_timeout: float, redis_kwargs: dict[str, Any]
    ) -> tuple[C, C | None]:
        """(command client, blocking client or ``None`` for its twin) for ``url``."""
        raise NotImplementedError

    @property
    def client(self) -> C:
        """The command client (for callers composing their own keys with this server)."""
        return self._client

    @property
    def blocking_client(self) -> C:
        """A client whose sockets tolerate ``XREAD BLOCK`` of up to 5 s (its own pool)."""
        return self._blocking

    @property
    def key_prefix(self) -> str:
        """The first part of every key this backend uses."""
        return self._prefix

    def keys(self, name: str) -> KeyLayout:
        layout = self._layouts.get(name)
        if layout is None:
            layout = self._layouts[name] = KeyLayout(self._prefix, name)
        return layout

    def wake_on(
        self, name: str, after_revision: int, *, wakes_only: bool = False
    ) -> tuple[str, str]:
        """The stream key and entry id an ``XREAD BLOCK`` waits on to wake when synchronizer
        ``name`` has an entry after ``after_revision`` (``-1``: any): a caller that blocks on
        several streams in one call (readergroup's readers: segments and state logs) adds
        this pair to its XREAD instead of building the log's key and ids itself.
        ``wakes_only``: only entries appended with ``wake`` count (the log's wake stream)."""
        return wake_on(self.keys(name), after_revision, wakes_only=wakes_only)

    def follower_wake_on(self, name: str, after_revision: int, follower: str) -> tuple[str, str]:
        """The stream key and entry id an ``XREAD BLOCK`` waits on to wake when an entry of
        synchronizer ``name`` after ``after_revision`` names ``follower`` in its wake-up (see
        :meth:`~statesync.names.KeyLayout.follower_wake`); with :meth:`wake_on`'s
        ``wakes_only`` pair, every wake-up that concerns the follower."""
        return self.keys(name).follower_wake(follower), past_wakes_of(after_revision)


def client_options(socket_timeout: float) -> dict[str, Any]:
    """The options of a backend's command client (its ``retry``, of its own kind, aside):
    redis-py's retries off (a re-sent append carries its writer sequence one level up)."""
    return {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": min(socket_timeout, 5.0),
        "retry_on_timeout": False,
    }


def blocking_options(connection_kwargs: dict[str, Any], retry: Any) -> dict[str, Any]:
    """A blocking client's connection options, made from the command client's."""
    return {**connection_kwargs, "socket_timeout": BLOCKING_SOCKET_TIMEOUT, "retry": retry}


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One run of a Lua script: its name, KEYS and ARGV."""

    script: str
    keys: list[str]
    args: list[Any]


def initialize_call(k: KeyLayout, snapshot: bytes, incarnation: str) -> ScriptCall:
    return ScriptCall(
        "initialize", [k.meta, k.snapshots, k.log, k.writers, k.wake], [snapshot, incarnation, 1]
    )


def initialized(name: str, reply: Any) -> bool:
    return status.raise_for_status("initialize", name, reply) == status.OK


APPEND_DEFAULTS: dict[str, Any] = {
    "expected_revision": None,
    "incarnation": "",
    "anchor_revision": -1,
    "anchor_history": "",
    "wake": True,
    "keys": None,
}
"""The defaults of :meth:`statesync.backend.LogBackend.append`'s optional arguments."""


def append_call(k: KeyLayout, payload: bytes, **options: Any) -> ScriptCall:
    """append.lua for :meth:`statesync.backend.LogBackend.append`'s keyword arguments
    (``writer``, ``sequence``, ``max_bytes`` and the optional ones)."""
    o = {**APPEND_DEFAULTS, **options}
    wake = o["wake"]
    named = not isinstance(wake, bool)
    followers = sorted(wake) if named else []
    expected = o["expected_revision"]
    return ScriptCall(
        "append",
        [k.meta, k.log, k.writers, k.wake, k.wakers, *map(k.follower_wake, followers)],
        [
            -1 if expected is None else expected,
            payload,
            o["max_bytes"],
            o["writer"],
            o["sequence"],
            o["incarnation"],
            o["anchor_revision"],
            o["anchor_history"],
            1 if named or wake else 0,
            "\n".join(o["keys"] or ()),
            1 if named else 0,
            "\n".join(followers),
            FOLLOWER_WAKE_TTL_MS,
        ],
    )


def append_outcome(name: str, reply: Any) -> AppendOutcome:
    code = status.raise_for_status("append", name, reply)
    if code == status.OK:
        return AppendOutcome(code, int(reply[1]), int(reply[2]), text(reply[3]))
    return AppendOutcome(code, int(reply[1]))


def wake_call(k: KeyLayout, revision: int, followers: Collection[str] | None) -> ScriptCall | None:
    """``None``: nobody to wake (``''`` would mean every follower to wake.lua)."""
    if followers is not None and not followers:
        return None
    named = sorted(followers or ())
    return ScriptCall(
        "wake",
        [k.meta, k.wake, k.wakers, *map(k.follower_wake, named)],
        [revision, "\n".join(named), FOLLOWER_WAKE_TTL_MS],
    )


def woke(name: str, reply: Any) -> bool:
    return status.raise_for_status("wake", name, reply) == status.OK


def read_call(
    k: KeyLayout,
    after_revision: int,
    limit: int,
    *,
    max_entry_bytes: int | None = None,
    max_snapshot_bytes: int | None = None,
) -> ScriptCall:
    limits = [-1 if m is None else m for m in (max_entry_bytes, max_snapshot_bytes)]
    return ScriptCall("read", [k.meta, k.log, k.snapshots], [after_revision, limit, *limits])


def read_result(name: str, reply: Any) -> ReadResult:
    status.raise_for_status("read", name, reply)
    try:
        _, head, incarnation, snapshot_revision, snapshot, entries, anchor, snap_history = reply[:8]
        refused = reply[8] if len(reply) > 8 else 0
        return ReadResult(
            int(head),
            text(incarnation),
            int(snapshot_revision),
            snapshot,
            [raw_entry(entry) for entry in entries],
            text(anchor),
            text(snap_history),
            int(refused),
        )
    except (ValueError, TypeError, AttributeError) as exc:
        raise BackendProtocolError(f"synchronizer {name!r}: malformed read reply: {exc}") from exc


def compact_call(
    k: KeyLayout, revision: int, snapshot: bytes, *, incarnation: str = "", history: str = ""
) -> ScriptCall:
    return ScriptCall(
        "compact",
        [k.meta, k.log, k.snapshots, k.writers],
        [revision, snapshot, incarnation, history],
    )


def compact_outcome(name: str, reply: Any) -> CompactOutcome:
    code = status.raise_for_status("compact", name, reply)
    if code == status.OK:
        return CompactOutcome(True, int(reply[1]), int(reply[2]))
    return CompactOutcome(False, int(reply[1]), 0)


def wake_on(k: KeyLayout, after_revision: int, *, wakes_only: bool) -> tuple[str, str]:
    """The stream and entry id an ``XREAD`` waits after for an entry past ``after_revision``
    (``wakes_only``: a wake-up for every follower); see ``RedisLogBackend.wake_on``."""
    if wakes_only:
        return k.wake, past_wakes_of(after_revision)
    return k.log, f"{max(after_revision, 0)}-0"


def wait_streams(
    k: KeyLayout, after_revision: int, *, wakes_only: bool = False, follower: str | None = None
) -> dict[Any, Any]:
    """The streams (and ids) one ``XREAD BLOCK`` of a ``wait`` blocks on."""
    streams: dict[Any, Any] = dict([wake_on(k, after_revision, wakes_only=wakes_only)])
    if wakes_only and follower is not None:
        streams[k.follower_wake(follower)] = past_wakes_of(after_revision)
    return streams


def block_chunks(timeout: float) -> list[int]:
    """The ``BLOCK`` times (ms) a wait of ``timeout`` seconds is made of (at least 1 ms)."""
    remaining_ms = max(1, math.ceil(timeout * 1000))
    chunks = [MAX_BLOCK_MS] * (remaining_ms // MAX_BLOCK_MS)
    if remaining_ms % MAX_BLOCK_MS:
        chunks.append(remaining_ms % MAX_BLOCK_MS)
    return chunks


def deleted(replies: Any) -> bool:
    """Whether the ``DEL`` closing a delete transaction removed anything."""
    return bool(replies) and int(replies[-1]) > 0


def time_ms(reply: Any) -> int:
    """A ``TIME`` reply (seconds, microseconds) in milliseconds."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def past_wakes_of(revision: int) -> str:
    """The wake-stream id past every wake-up of ``revision`` (wake.lua's second ones too)."""
    return f"{max(revision, 0)}-{LAST_SEQUENCE}"


def text(value: Any) -> str:
    """A Lua string reply as text; ``""`` for a nil/false reply (nothing known)."""
    if value is None or value is False:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def raw_entry(entry: Any) -> RawEntry:
    """Parse one XRANGE item; malformed items become a payload that fails to decode."""
    entry_id, fields = entry
    revision_part, _, sequence_part = entry_id.partition(b"-")
    revision = int(revision_part)
    values = dict(zip(fields[::2], fields[1::2], strict=False))
    payload = values.get(b"d")
    time_ms = values.get(b"t", b"0")
    if sequence_part != b"0" or payload is None:
        # Not written by append.lua. Keep the revision so the error can name it.
        return RawEntry(revision, 0, b"")
    try:
        server_time = int(time_ms)
    except ValueError:
        server_time = 0
    refused = values.get(b"x")  # read.lua left an over-limit payload in Redis
    return RawEntry(
        revision, server_time, payload, text(values.get(b"h")), int(refused) if refused else 0
    )
