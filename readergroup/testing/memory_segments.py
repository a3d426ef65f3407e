"""Segments in memory with an injected clock: the second backend of the segment data plane.

:class:`MemorySegmentStore` has the interface of
:class:`~readergroup.storage.segment_store.SegmentStore` (:class:`~readergroup.storage.
segment_store.SegmentStorage`) and the semantics of its Lua scripts: it answers every mutation
with the reply table the script would return, checked by the same
:mod:`~readergroup.storage.segment_status`, and keeps entries in the raw shape Redis returns
them in, parsed by the same :class:`~readergroup.storage.segment_records.SegmentEvent`. So a
test suite runs unchanged on memory and on Redis (``tests/test_segment_store.py``), the way
statesync's runs on its two log backends. The Redis run is the one CI trusts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from readergroup.core.errors import SegmentNotFoundError, TruncatedDataError
from readergroup.core.routing import segment_name
from readergroup.storage import segment_status
from readergroup.storage.segment_records import (
    AppendBatch,
    AppendReply,
    SegmentEvent,
    SegmentState,
    parse_event,
)
from readergroup.storage.segment_store import SegmentStorage, append_reply

Entry = list[Any]
"""One raw entry as Redis returns it: ``[b"<offset + 1>-0", [field, value, ...]]``."""


@dataclass
class _Segment:
    created_ms: int
    sealed: bool = False
    opening: bool = False
    head: int = 0
    bytes: int = 0
    entries: list[Entry] = field(default_factory=list)
    """Entries from the head on: ``entries[i]`` is at offset ``head + i``."""
    writers: dict[str, int] = field(default_factory=dict)

    @property
    def tail(self) -> int:
        return self.head + len(self.entries)

    def state(self, number: int) -> SegmentState:
        return SegmentState(number, True, self.head, self.tail, self.bytes, self.sealed)


class MemorySegmentStore:
    """Every segment of every stream in dicts, guarded by one lock; ``now_ms`` is the server
    clock events are stamped with (never going back, like ``TIME`` on one server)."""

    def __init__(
        self, now_ms: Callable[[], int], *, changed: threading.Condition | None = None
    ) -> None:
        """``changed``: the condition to notify on every change (shared by a caller that
        waits on segments and other in-memory data at once)."""
        self._now_ms = now_ms
        self._last_ms = 0
        self._segments: dict[tuple[str, str, int], _Segment] = {}
        self._changed = changed or threading.Condition()

    def _server_ms(self) -> int:
        self._last_ms = max(self._last_ms, self._now_ms())
        return self._last_ms

    def _get(self, scope: str, stream: str, segment: int) -> _Segment | None:
        return self._segments.get((scope, stream, segment))

    def _run(self, script: str, scope: str, stream: str, segment: int, reply: list[Any]) -> Any:
        segment_status.check(script, segment_name(scope, stream, segment), reply)
        return reply

    # -- creation and scaling ------------------------------------------------------------------
    def create_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None:
        with self._changed:
            for number in segments:
                self._segments.setdefault((scope, stream, number), _Segment(now_ms))

    def create_closed_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None:
        with self._changed:
            for number in segments:
                key = (scope, stream, number)
                if key not in self._segments:
                    self._segments[key] = _Segment(now_ms, sealed=True, opening=True)

    def open_segment(self, scope: str, stream: str, segment: int) -> bool:
        with self._changed:
            found = self._get(scope, stream, segment)
            if found is None:
                reply: list[Any] = [segment_status.NOT_FOUND]
            elif not found.opening:
                reply = [segment_status.OK, 0]
            else:
                found.sealed = found.opening = False
                reply = [segment_status.OK, 1]
        return bool(self._run("open_segment", scope, stream, segment, reply)[1])

    def open_segments(self, scope: str, stream: str, segments: Sequence[int]) -> list[int]:
        return [s for s in segments if self.open_segment(scope, stream, s)]

    def seal_segments(self, scope: str, stream: str, segments: Sequence[int]) -> dict[int, int]:
        return {s: self.seal(scope, stream, s) for s in segments}

    def seal(self, scope: str, stream: str, segment: int) -> int:
        with self._changed:
            found = self._get(scope, stream, segment)
            if found is None:
                reply: list[Any] = [segment_status.NOT_FOUND]
            else:
                found.sealed, found.opening = True, False
                reply = [segment_status.OK, found.tail, found.bytes]
            self._changed.notify_all()
        return int(self._run("seal_segment", scope, stream, segment, reply)[1])

    # -- appends -------------------------------------------------------------------------------
    def append(self, batches: Sequence[AppendBatch]) -> list[AppendReply]:
        with self._changed:
            replies = [append_reply(batch, self._append_one(batch)) for batch in batches]
            self._changed.notify_all()
        return replies

    def _append_one(self, batch: AppendBatch) -> list[Any]:
        """What ``append_events.lua`` replies to ``batch`` (and its effect)."""
        found = self._get(batch.scope, batch.stream, batch.segment)
        if found is None:
            return [segment_status.NOT_FOUND]
        if found.sealed:
            return [segment_status.SEALED, found.tail]
        last = found.writers.get(batch.writer)
        if last is not None and last >= batch.sequence:
            return [segment_status.DUPLICATE, last]
        args = batch.event_args
        for index in range(batch.count):
            size = len(_bytes(args[4 * index + 1])) + len(_bytes(args[4 * index + 3]))
            if size > batch.max_event_size:
                return [segment_status.TOO_LARGE, index + 1, size]
        ms = self._server_ms()
        replay = batch.replay
        if replay is not None:  # where it was, under the one epoch there is (0)
            if (
                found.tail != replay.first_offset
                or replay.epoch != 0
                or replay.created != str(found.created_ms)
            ):
                return [segment_status.REGRESSED, found.tail, 0]
            ms = replay.server_ms
        first = found.tail
        for index in range(batch.count):
            key, payload, writer_ms, headers = args[4 * index : 4 * index + 4]
            fields: list[bytes] = [] if key == "" else [b"k", _bytes(key[1:])]
            if headers:
                fields += [b"h", _bytes(headers)]
            data = _bytes(payload)
            fields += [b"p", data, b"w", _bytes(writer_ms), b"t", b"%d" % ms]
            fields += [b"b", b"%d" % found.bytes]
            found.entries.append([b"%d-0" % (found.tail + 1), fields])
            found.bytes += len(data)
        found.writers[batch.writer] = batch.sequence
        return [segment_status.OK, first, batch.count, ms, str(found.created_ms), 0]

    # -- truncation ----------------------------------------------------------------------------
    def truncate(self, scope: str, stream: str, segment: int, offset: int) -> int:
        with self._changed:
            found = self._get(scope, stream, segment)
            if found is None:
                reply: list[Any] = [segment_status.NOT_FOUND]
            elif offset > found.tail:
                reply = [segment_status.PAST_TAIL, found.tail]
            elif offset <= found.head:
                reply = [segment_status.OK, found.head, 0]
            else:
                removed = offset - found.head
                del found.entries[:removed]
                found.head = offset
                reply = [segment_status.OK, offset, removed]
        return int(self._run("truncate_segment", scope, stream, segment, reply)[2])

    def delete_segments(self, scope: str, stream: str, segments: Sequence[int]) -> None:
        with self._changed:
            for number in segments:
                self._segments.pop((scope, stream, number), None)

    # -- reads ---------------------------------------------------------------------------------
    def offset_at_time(
        self, scope: str, stream: str, segment: int, server_ms: int
    ) -> tuple[int, int]:
        with self._changed:
            found = self._get(scope, stream, segment)
            if found is None:
                reply: list[Any] = [segment_status.NOT_FOUND]
            else:
                offset = next(
                    (
                        found.head + i
                        for i, entry in enumerate(found.entries)
                        if parse_event(segment, entry).server_ms >= server_ms
                    ),
                    found.tail,
                )
                reply = [segment_status.OK, offset, found.tail]
        self._run("offset_at_time", scope, stream, segment, reply)
        return int(reply[1]), int(reply[2])

    def read_range(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> tuple[SegmentState, list[SegmentEvent]]:
        with self._changed:
            found = self._get(scope, stream, segment)
            name = segment_name(scope, stream, segment)
            if found is None:
                raise SegmentNotFoundError(f"segment {name} does not exist")
            if start < found.head:
                raise TruncatedDataError(name, start, found.head)
            entries = self._entries(found, start, stop, limit)
            return found.state(segment), [parse_event(segment, e) for e in entries]

    def segment_ids(self) -> list[tuple[str, str, int]]:
        """(scope, stream, segment) of every segment that exists."""
        with self._changed:
            return list(self._segments)

    def lost_in_failover(self, scope: str, stream: str, segment: int, begin: int, end: int) -> bool:
        """Never: one in-memory "server" does not fail over."""
        return False

    def epochs(self, scope: str, stream: str, segment: int) -> list[tuple[int, int]]:
        """Epoch 0 from offset 0 only: one in-memory "server" never changes."""
        return [(0, 0)]

    def epoch_histories(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, tuple[int, list[tuple[int, int]]]]:
        """Each existing segment's tail, with epoch 0 only (see :meth:`epochs`)."""
        with self._changed:
            found = {number: self._get(scope, stream, number) for number in segments}
            return {n: (s.tail, [(0, 0)]) for n, s in found.items() if s is not None}

    def read_raw(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> Any:
        with self._changed:
            found = self._get(scope, stream, segment)
            return [] if found is None else self._entries(found, start, stop, limit)

    @staticmethod
    def _entries(found: _Segment, start: int, stop: int, limit: int) -> list[Entry]:
        end = found.tail if stop < 0 else min(stop, found.tail)
        first = max(start, found.head) - found.head
        return found.entries[first : max(first, end - found.head)][:limit]

    def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        with self._changed:
            states = {}
            for number in segments:
                found = self._get(scope, stream, number)
                states[number] = (
                    SegmentState(number, False, 0, 0, 0, False)
                    if found is None
                    else found.state(number)
                )
            return states

    def read_blocking(
        self,
        scope: str,
        stream: str,
        positions: Mapping[int, int],
        timeout: float,
        limit: int,
    ) -> dict[int, list[SegmentEvent]]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found: dict[int, list[SegmentEvent]] = {}
                for number, position in positions.items():
                    segment = self._get(scope, stream, number)
                    entries = [] if segment is None else self._entries(segment, position, -1, limit)
                    if entries:
                        found[number] = [parse_event(number, e) for e in entries]
                remaining = deadline - time.monotonic()
                if found or remaining <= 0:
                    return found
                self._changed.wait(remaining)

    def lag_probe(
        self, scope: str, stream: str, positions: Mapping[int, int]
    ) -> dict[int, tuple[int, int, int, int]]:
        with self._changed:
            out = {}
            for number, position in positions.items():
                found = self._get(scope, stream, number)
                tail, total = (0, 0) if found is None else (found.tail, found.bytes)
                entries = [] if found is None else self._entries(found, position, position + 1, 1)
                if entries:
                    event = parse_event(number, entries[0])
                    out[number] = (tail, total, event.byte_offset, event.server_ms)
                else:
                    out[number] = (tail, total, total, -1)
            return out


def _bytes(value: Any) -> bytes:
    """A script argument as Redis stores it: bytes, text as UTF-8, numbers in decimal."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return str(value).encode()


def _conforms(store: MemorySegmentStore) -> SegmentStorage:
    """mypy checks here that the memory store has the interface of the Redis one."""
    return store
