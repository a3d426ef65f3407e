"""The Redis backends' wire format: the keys and arguments of each script call, and how its
reply reads. Pure functions, shared by :class:`~statesync.redis_backend.RedisLogBackend`
(blocking redis-py) and :class:`~statesync.aio_redis_backend.AsyncRedisLogBackend`
(``redis.asyncio``), so a threaded and an asyncio client of one log speak the same protocol.

A call is a :class:`ScriptCall`: the script's name (:data:`statesync.scripts.SCRIPT_NAMES`),
its KEYS and its ARGV, in the order the script's header contract gives.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from statesync import status
from statesync.backend import AppendOutcome, CompactOutcome, RawEntry, ReadResult
from statesync.errors import BackendProtocolError
from statesync.names import KeyLayout

MAX_BLOCK_MS = 5_000
"""Longest single ``XREAD BLOCK`` (ms); waits loop over chunks so a dead server is noticed."""
BLOCKING_SOCKET_MARGIN = 5.0
"""Seconds a blocking client's socket timeout exceeds :data:`MAX_BLOCK_MS`."""
BLOCKING_SOCKET_TIMEOUT = MAX_BLOCK_MS / 1000 + BLOCKING_SOCKET_MARGIN
FOLLOWER_WAKE_TTL_MS = 600_000
"""A follower's wake stream expires this long after the newest wake-up naming it (a follower
reading it later misses nothing it needs: it refreshes on its own too)."""
LAST_SEQUENCE = 2**64 - 1
"""The largest sequence part of a stream entry id: waiting after ``<revision>-LAST_SEQUENCE``
skips every wake-up of that revision."""


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


def append_call(
    k: KeyLayout,
    payload: bytes,
    *,
    expected_revision: int | None,
    writer: str,
    sequence: int,
    max_bytes: int,
    incarnation: str,
    anchor_revision: int,
    anchor_history: str,
    wake: bool | Collection[str],
    keys: Sequence[str] | None,
) -> ScriptCall:
    named = not isinstance(wake, bool)
    followers = sorted(wake) if not isinstance(wake, bool) else []
    expected = -1 if expected_revision is None else expected_revision
    return ScriptCall(
        "append",
        [k.meta, k.log, k.writers, k.wake, k.wakers, *map(k.follower_wake, followers)],
        [
            expected,
            payload,
            max_bytes,
            writer,
            sequence,
            incarnation,
            anchor_revision,
            anchor_history,
            1 if named or wake else 0,
            "\n".join(keys or ()),
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
    max_entry_bytes: int | None,
    max_snapshot_bytes: int | None,
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
    k: KeyLayout, revision: int, snapshot: bytes, incarnation: str, history: str
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
    k: KeyLayout, after_revision: int, *, wakes_only: bool, follower: str | None
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
