"""The segment data plane on Redis: :class:`SegmentStore` creates, opens, appends to, reads,
seals, truncates and deletes segments, and finds the offset at a time. Every mutation is one
script of :mod:`readergroup.storage.scripts`; its status codes are checked by
:mod:`readergroup.storage.segment_status`. Keys come from :class:`~readergroup.storage.keys.
KeyLayout`; the values it returns are those of :mod:`readergroup.storage.segment_records`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import redis
from redis.commands.core import Script

from readergroup.core.errors import ReaderGroupError, SegmentNotFoundError, TruncatedDataError
from readergroup.core.routing import segment_name
from readergroup.storage import segment_status
from readergroup.storage.keys import KeyLayout
from readergroup.storage.multi_read import MultiKeyReader
from readergroup.storage.native_append import append_natively
from readergroup.storage.script_append import append_by_script
from readergroup.storage.segment_records import (
    HISTORY_FIELDS,
    LAST_EPOCH,
    META_FIELDS,
    REFUSED,
    AppendBatch,
    AppendReply,
    SegmentEvent,
    SegmentState,
    histories_of,
    lost_between,
    parse_epochs,
    parse_event,
    parse_lost_ranges,
    range_bounds,
    segment_state_of,
)
from readergroup.storage.translate import translate_errors
from statesync import Acks
from statesync.redis_backend import check_acknowledged, run_acknowledged, run_read_only

SCRIPTS_PER_ROUND = 1_000
"""Segment scripts sent in one pipelined round trip (creating, opening, sealing thousands)."""


def append_reply(batch: AppendBatch, reply: Any) -> AppendReply:
    """One batch's reply, read on its own: an error reply refuses this batch only, naming its
    segment; the other batches of the pipeline keep their own replies."""
    name = segment_name(batch.scope, batch.stream, batch.segment)
    try:
        if isinstance(reply, Exception):
            with translate_errors(f"append to segment {name}"):
                raise reply
        code = segment_status.check("append_events", name, reply)
    except ReaderGroupError as exc:
        return AppendReply(REFUSED, error=exc)
    if code == segment_status.OK:
        created = reply[4] if len(reply) > 4 else b""
        if isinstance(created, bytes):
            created = created.decode()
        epoch = int(reply[5]) if len(reply) > 5 else 0
        return AppendReply(code, int(reply[1]), int(reply[3]), created=str(created), epoch=epoch)
    if code == segment_status.SEALED:
        return AppendReply(code, tail=int(reply[1]))
    if code == segment_status.REGRESSED:
        return AppendReply(code, tail=int(reply[1]), epoch=int(reply[2]))
    return AppendReply(code)


def append_replies(
    acks: Acks, batches: Sequence[AppendBatch], replies: list[Any], waits: list[Any], client: Any
) -> list[AppendReply]:
    """Each batch's :class:`AppendReply` (:func:`append_reply`); if any wrote, the replies to
    the acknowledgement waits (``waits``) must show it acknowledged as ``acks`` asks (else a
    retriable error). ``client``: the one the appends went through (a Sentinel client asks
    where the primary is at once on a shortfall; ``None``: none to ask)."""
    results = [append_reply(batch, reply) for batch, reply in zip(batches, replies, strict=True)]
    wrote_nothing = (segment_status.SEALED, segment_status.REGRESSED, REFUSED)
    if any(r.status not in wrote_nothing for r in results):
        with translate_errors("append"):
            for acknowledged in waits:
                where = f"stream {batches[0].scope}/{batches[0].stream}"
                check_acknowledged(acks, acknowledged, where, client)
    return results


def native_replies(
    batches: Sequence[AppendBatch], appended: Sequence[tuple[int, int, bytes, int]]
) -> list[list[Any]]:
    """A native append's outcomes (first offset, server ms, created, epoch per batch) as the
    replies ``append_events.lua`` would have given."""
    return [
        [segment_status.OK, first, batch.count, ms, created, epoch]
        for batch, (first, ms, created, epoch) in zip(batches, appended, strict=True)
    ]


def segment_states_of(segments: Sequence[int], replies: Sequence[Any]) -> dict[int, SegmentState]:
    """Each segment's state from its ``HMGET meta`` reply (of
    :data:`~readergroup.storage.segment_records.META_FIELDS`), by segment."""
    return {
        segment: segment_state_of(segment, fields)
        for segment, fields in zip(segments, replies, strict=True)
    }


class SegmentStorage(Protocol):
    """The interface of the segment data plane: :class:`SegmentStore` on Redis, and
    :class:`~readergroup.testing.memory_segments.MemorySegmentStore` in memory."""

    def create_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None: ...

    def create_closed_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None: ...

    def open_segment(self, scope: str, stream: str, segment: int) -> bool: ...

    def open_segments(self, scope: str, stream: str, segments: Sequence[int]) -> list[int]: ...

    def append(self, batches: Sequence[AppendBatch]) -> list[AppendReply]: ...

    def seal(self, scope: str, stream: str, segment: int) -> int: ...

    def seal_segments(self, scope: str, stream: str, segments: Sequence[int]) -> dict[int, int]: ...

    def truncate(self, scope: str, stream: str, segment: int, offset: int) -> int: ...

    def offset_at_time(
        self, scope: str, stream: str, segment: int, server_ms: int
    ) -> tuple[int, int]: ...

    def read_range(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> tuple[SegmentState, list[SegmentEvent]]: ...

    def read_raw(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> Any: ...

    def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]: ...

    def read_blocking(
        self, scope: str, stream: str, positions: Mapping[int, int], timeout: float, limit: int
    ) -> dict[int, list[SegmentEvent]]: ...

    def lag_probe(
        self, scope: str, stream: str, positions: Mapping[int, int]
    ) -> dict[int, tuple[int, int, int, int]]: ...

    def delete_segments(self, scope: str, stream: str, segments: Sequence[int]) -> None: ...

    def lost_in_failover(
        self, scope: str, stream: str, segment: int, begin: int, end: int
    ) -> bool: ...

    def epochs(self, scope: str, stream: str, segment: int) -> list[tuple[int, int]]: ...

    def epoch_histories(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, tuple[int, list[tuple[int, int]]]]: ...


class SegmentStore:
    """Segments of every stream under one key prefix. Thread-safe (stateless beyond the
    clients). ``acks``: the acknowledgement each append waits for."""

    def __init__(
        self,
        client: redis.Redis,
        scripts: Mapping[str, Script],
        keys: KeyLayout,
        acks: Acks,
        cluster: bool,
        reads: MultiKeyReader,
    ) -> None:
        self._client = client
        self._scripts = scripts
        self._keys = keys
        self._acks = acks
        self._cluster = cluster
        self._reads = reads

    def create_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None:
        """Create segments' meta hashes (idempotent: an existing segment is left alone)."""
        with translate_errors("create segments"):
            pipe = self._client.pipeline(transaction=False)
            for segment in segments:
                pipe.hsetnx(self._keys.segment(scope, stream, segment).meta, "created_ms", now_ms)
            pipe.execute()

    def create_closed_segments(
        self, scope: str, stream: str, segments: Sequence[int], now_ms: int
    ) -> None:
        """Create a scale's successors sealed until :meth:`open_segment` (idempotent: an
        existing segment is left alone); see ``create_closed_segment.lua``."""
        self._run_each("create_closed_segment", scope, stream, segments, 1, now_ms)

    def open_segment(self, scope: str, stream: str, segment: int) -> bool:
        """Open a successor created closed, once its predecessors are sealed; ``False`` if it
        was open already or is sealed for real."""
        return bool(self._run("open_segment", scope, stream, segment, 1)[1])

    def open_segments(self, scope: str, stream: str, segments: Sequence[int]) -> list[int]:
        """:meth:`open_segment` of each of ``segments``; return those it opened."""
        replies = self._run_each("open_segment", scope, stream, segments, 1)
        return [segment for segment, reply in zip(segments, replies, strict=True) if reply[1]]

    def append(self, batches: Sequence[AppendBatch]) -> list[AppendReply]:
        """Send every batch in one pipelined round trip; one reply per batch, in order. A batch
        the server refuses gets a reply carrying the error (:attr:`AppendReply.error`); only a
        failure of the round trip itself raises. Off a cluster, a round of enough events goes
        as native ``XADD``s in one transaction (:mod:`readergroup.storage.native_append`);
        anything unusual takes ``append_events.lua``, whose replies define the outcome, one
        ``EVALSHA`` per batch and nothing else (:mod:`readergroup.storage.script_append`).

        Unless ``ClientConfig.acks`` is leader, the acknowledgement wait follows on the same
        connection, and a shortfall raises (retriable :class:`AckTimeoutError`)."""
        script = self._scripts["append_events"]
        wait = self._acks.wait_command()
        waits: list[Any] = []
        replies: list[Any] = []
        with translate_errors("append"):
            if self._cluster and wait is not None:  # per node: the append, then the wait
                for batch in batches:
                    keys = list(self._keys.segment(batch.scope, batch.stream, batch.segment))
                    reply, acknowledged = run_acknowledged(
                        self._client, script, keys, batch.script_args(), wait
                    )
                    replies.append(reply)
                    waits.append(acknowledged)
            elif self._cluster:  # redis-py does not pipeline scripts across a cluster
                for batch in batches:
                    meta, events, writers = self._keys.segment(
                        batch.scope, batch.stream, batch.segment
                    )
                    try:
                        replies.append(
                            script(keys=[meta, events, writers], args=batch.script_args())
                        )
                    except redis.ResponseError as exc:
                        replies.append(exc)
            elif (native := append_natively(self._client, self._keys, batches, wait)) is not None:
                appended, acknowledged = native
                replies = native_replies(batches, appended)
                if wait is not None:
                    waits.append(acknowledged)
            else:
                replies, acknowledged = append_by_script(
                    self._client, self._keys, script, batches, wait
                )
                if wait is not None:
                    waits.append(acknowledged)
        return append_replies(self._acks, batches, replies, waits, self._client)

    def _run(
        self, script: str, scope: str, stream: str, segment: int, keys: int, *args: Any
    ) -> Any:
        meta, events, writers = self._keys.segment(scope, stream, segment)
        with translate_errors(script):
            reply = self._scripts[script](keys=[meta, events, writers][:keys], args=list(args))
        segment_status.check(script, segment_name(scope, stream, segment), reply)
        return reply

    def _run_each(
        self, script: str, scope: str, stream: str, segments: Sequence[int], keys: int, *args: Any
    ) -> list[Any]:
        """:meth:`_run` of ``script`` on each of ``segments`` (same ``args``), pipelined in
        rounds of :data:`SCRIPTS_PER_ROUND` off a cluster (redis-py does not pipeline scripts
        across one); the first refusal raises, after every round sent so far was applied."""
        if self._cluster:
            return [self._run(script, scope, stream, s, keys, *args) for s in segments]
        runner = self._scripts[script]
        replies: list[Any] = []
        for first in range(0, len(segments), SCRIPTS_PER_ROUND):
            chunk = segments[first : first + SCRIPTS_PER_ROUND]
            with translate_errors(script):
                pipe = self._client.pipeline(transaction=False)
                for segment in chunk:
                    segment_keys = list(self._keys.segment(scope, stream, segment))[:keys]
                    runner(keys=segment_keys, args=list(args), client=pipe)
                chunk_replies = pipe.execute(raise_on_error=False)
                for reply in chunk_replies:
                    if isinstance(reply, Exception):
                        raise reply  # as a lone call would (not annotated by the pipeline)
                replies.extend(chunk_replies)
        for segment, reply in zip(segments, replies, strict=True):
            segment_status.check(script, segment_name(scope, stream, segment), reply)
        return replies

    def seal(self, scope: str, stream: str, segment: int) -> int:
        """Seal a segment (idempotent); return its final tail offset."""
        return int(self._run("seal_segment", scope, stream, segment, 1)[1])

    def seal_segments(self, scope: str, stream: str, segments: Sequence[int]) -> dict[int, int]:
        """:meth:`seal` each of ``segments`` (pipelined); return their final tails."""
        replies = self._run_each("seal_segment", scope, stream, segments, 1)
        return {segment: int(reply[1]) for segment, reply in zip(segments, replies, strict=True)}

    def truncate(self, scope: str, stream: str, segment: int, offset: int) -> int:
        """Delete events below ``offset``; return how many were removed."""
        return int(self._run("truncate_segment", scope, stream, segment, 2, offset)[2])

    def offset_at_time(
        self, scope: str, stream: str, segment: int, server_ms: int
    ) -> tuple[int, int]:
        """The first offset appended at or after ``server_ms`` (at least the head; the tail
        when every event is older), and the tail."""
        meta, events, _ = self._keys.segment(scope, stream, segment)
        with translate_errors("offset_at_time"):
            reply = run_read_only(
                self._client, self._scripts["offset_at_time"], [meta, events], [server_ms]
            )
        segment_status.check("offset_at_time", segment_name(scope, stream, segment), reply)
        return int(reply[1]), int(reply[2])

    def read_range(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> tuple[SegmentState, list[SegmentEvent]]:
        """Events ``[start, stop)`` (``stop=-1``: to the tail), at most ``limit``, with the
        segment's state read atomically alongside. Raises TruncatedDataError below the head."""
        meta, events, _ = self._keys.segment(scope, stream, segment)
        last = "+" if stop < 0 else f"{stop}-{LAST_EPOCH}"
        with translate_errors("read"):
            pipe = self._client.pipeline(transaction=True)  # MULTI/EXEC: state and events agree
            pipe.hmget(meta, *META_FIELDS)
            pipe.xrange(events, f"{start + 1}-0", last, count=limit)
            (created, sealed, tail, size, head), entries = pipe.execute()
        name = segment_name(scope, stream, segment)
        state = segment_state_of(segment, (created, sealed, tail, size, head))
        if not state.exists:
            raise SegmentNotFoundError(f"segment {name} does not exist")
        if start < state.head:
            raise TruncatedDataError(name, start, state.head)
        return state, [parse_event(segment, entry) for entry in entries]

    def read_raw(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> Any:
        """The raw ``XRANGE`` reply for events ``[start, stop)`` (``stop=-1``: to the tail),
        at most ``limit``: no metadata, no transaction, nothing parsed. For a caller that
        proves the reply by itself (the Spark partition reader) and falls back to
        :meth:`read_range` when it cannot."""
        events = self._keys.segment(scope, stream, segment).events
        with translate_errors("read"):
            return self._client.xrange(events, *range_bounds(start, stop), count=limit)

    def lost_ranges(self, scope: str, stream: str, segment: int) -> list[tuple[int, int]]:
        """Offset ranges ``[from, to)`` the segment lost in failovers and never reuses (meta
        field ``lost``, recorded by ``append_events.lua``), oldest first."""
        meta = self._keys.segment(scope, stream, segment).meta
        with translate_errors("read"):
            return parse_lost_ranges(self._client.hget(meta, "lost"))

    def epochs(self, scope: str, stream: str, segment: int) -> list[tuple[int, int]]:
        """The segment's epochs, ``(epoch, first offset)`` oldest first (meta field ``epochs``,
        written by ``epoch.lua``; epoch 0 first)."""
        meta = self._keys.segment(scope, stream, segment).meta
        with translate_errors("read"):
            return parse_epochs(self._client.hget(meta, "epochs"))

    def epoch_histories(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, tuple[int, list[tuple[int, int]]]]:
        """Each existing segment's tail and :meth:`epochs`, in one round trip, from the
        server reads go to (a reader checking that the log still holds what it read)."""
        metas = [self._keys.segment(scope, stream, segment).meta for segment in segments]
        return histories_of(segments, self._reads.hash_fields(metas, HISTORY_FIELDS))

    def lost_in_failover(self, scope: str, stream: str, segment: int, begin: int, end: int) -> bool:
        """Whether offsets ``[begin, end)`` are within :meth:`lost_ranges`."""
        return lost_between(self.lost_ranges(scope, stream, segment), begin, end)

    def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        """Head, tail, bytes and sealed flag of each segment, in one round trip."""
        with translate_errors("segment state"):
            pipe = self._client.pipeline(transaction=False)
            for segment in segments:
                meta = self._keys.segment(scope, stream, segment).meta
                pipe.hmget(meta, *META_FIELDS)
            replies = pipe.execute()
        return segment_states_of(segments, replies)

    def read_blocking(
        self,
        scope: str,
        stream: str,
        positions: Mapping[int, int],
        timeout: float,
        limit: int,
    ) -> dict[int, list[SegmentEvent]]:
        """Events at or after each segment's position, from several segments in one call,
        blocking up to ``timeout`` seconds (at most 5 per call) until at least one has
        something (``XREAD BLOCK``; no busy loop). Segments with nothing new are absent."""
        by_key = {self._keys.segment(scope, stream, s).events: s for s in positions}
        reply = self._reads.read_keys(
            {key: f"{positions[s]}-{LAST_EPOCH}" for key, s in by_key.items()}, timeout, limit
        )
        return {
            by_key[key]: [parse_event(by_key[key], entry) for entry in entries]
            for key, entries in reply.items()
        }

    def lag_probe(
        self, scope: str, stream: str, positions: Mapping[int, int]
    ) -> dict[int, tuple[int, int, int, int]]:
        """Per segment ``(tail, bytes, byte offset at position, server ms at position)`` in one
        round trip; the last two are the totals and ``-1`` when the position is at the tail."""
        with translate_errors("lag"):
            pipe = self._client.pipeline(transaction=False)
            for segment, position in positions.items():
                meta, events, _ = self._keys.segment(scope, stream, segment)
                pipe.hmget(meta, "events", "bytes")
                entry_ms = position + 1
                pipe.xrange(events, f"{entry_ms}-0", f"{entry_ms}-{LAST_EPOCH}", count=1)
            replies = pipe.execute()
        out = {}
        for index, segment in enumerate(positions):
            (tail, size), entries = replies[2 * index], replies[2 * index + 1]
            total = int(size or 0)
            if entries:
                event = SegmentEvent(segment, entries[0][0], entries[0][1])
                out[segment] = (int(tail or 0), total, event.byte_offset, event.server_ms)
            else:
                out[segment] = (int(tail or 0), total, total, -1)
        return out

    def delete_segments(self, scope: str, stream: str, segments: Sequence[int]) -> None:
        """Delete segments' keys: one DEL per segment (its keys share a hash slot)."""
        with translate_errors("delete segments"):
            pipe = self._client.pipeline(transaction=False)
            for segment in segments:
                pipe.delete(*self._keys.segment(scope, stream, segment))
            pipe.execute()
