"""The decisions of a writer's sender, without its I/O: shared by the sender thread of
:class:`~readergroup.client.writer.EventStreamWriter` and the sender task of
:class:`~readergroup.aio.writer.AsyncEventStreamWriter`, so both batch, route, settle, retry,
expire and put back exactly alike.

A round's delivery is a generator (:meth:`RoundSender.round_steps`) that *yields* what it needs
done and is *sent* the outcome:

* :class:`FetchState` (``refresh``: drop the cached metadata first): send the stream's
  :class:`~readergroup.core.stream_metadata.StreamState`;
* :class:`SendBatches`: send the replies of ``segments.append(batches)``;
* :class:`Pause`: wait ``seconds`` (the retry backoff; the injected clock's time).

A step that failed is *thrown* into the generator (the exception the I/O raised), which decides
whether to retry (a retriable :class:`~readergroup.core.errors.ReaderGroupError`, or a stream
not found) or to fail the round. The thread drives it with blocking calls, the task with
awaits (both through :class:`~readergroup.core.steps.StepDriver`). Nothing here does I/O,
takes a lock of its own or reads a clock that was not injected; what differs between a
thread and a task (waking waiters, the queue's lock) is left to the subclass:
:meth:`RoundSender._released` and ``_accounting``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import random
import uuid
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from itertools import chain
from operator import attrgetter
from typing import Any, Generic, NamedTuple, TypeVar

from readergroup.client.replay import AcknowledgedBatches
from readergroup.client.serializers import Serializer
from readergroup.core.errors import (
    EventTooLargeError,
    InvalidConfigError,
    ReaderGroupError,
    SegmentNotFoundError,
    SerializationError,
    StreamNotFoundError,
    StreamSealedError,
    WriteFailedError,
)
from readergroup.core.headers import Headers, encode_headers
from readergroup.core.routing import key_position
from readergroup.core.stream_metadata import StreamState
from readergroup.storage import segment_status
from readergroup.storage.segment_records import AppendBatch, AppendReply
from statesync import RetryPolicy
from statesync.clock import Clock
from statesync.retry import RetryBudget

logger = logging.getLogger("readergroup.client.writer")  # one logger for both senders

T = TypeVar("T")
MiB = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class EventWriterConfig:
    """Writer settings (the same for the threaded and the asyncio writer).

    Attributes:
        max_batch_events: most events in one script call to one segment (default 1000; 1-10000).
        max_in_flight_bytes: payload bytes queued or in flight before ``write_event`` blocks
            (default 32 MiB; >= 1 MiB).
        max_block: seconds ``write_event`` waits for room before raising (default 60.0).
        delivery_timeout: seconds a round of appends is retried before its events fail
            (default 120.0; > 0), like Kafka's ``delivery.timeout.ms``.
        linger: seconds the sender waits for more events before sending a non-full round
            (default 0.0: send at once; events arriving meanwhile form the next round).
        replay_window: seconds the writer keeps each acknowledged batch, to append it again,
            unchanged, where a failover lost it (default 30.0; 0 keeps none: the loss is only
            recorded, see :mod:`readergroup.client.replay`).
        replay_bytes: most payload bytes kept for that (default 16 MiB; oldest dropped first).
    """

    max_batch_events: int = 1000
    max_in_flight_bytes: int = 32 * MiB
    max_block: float = 60.0
    delivery_timeout: float = 120.0
    linger: float = 0.0
    replay_window: float = 30.0
    replay_bytes: int = 16 * MiB

    def __post_init__(self) -> None:
        if not 1 <= self.max_batch_events <= 10_000:
            raise InvalidConfigError(
                f"max_batch_events must be 1..10000, got {self.max_batch_events}"
            )
        if self.max_in_flight_bytes < MiB:
            raise InvalidConfigError("max_in_flight_bytes must be at least 1 MiB")
        if not self.max_block >= 0 or not self.delivery_timeout > 0 or not self.linger >= 0:
            raise InvalidConfigError("max_block and linger must be >= 0, delivery_timeout > 0")
        if not self.replay_window >= 0 or self.replay_bytes < 0:
            raise InvalidConfigError("replay_window and replay_bytes must be >= 0")


@dataclass(frozen=True, slots=True)
class EventPointer:
    """Where an acknowledged event landed."""

    segment: int
    offset: int


class QueuedEvent:
    """One written event on its way: what the sender sends, and its outcome once settled
    (one small object per event keeps ``write_event`` cheap). Subclasses tell waiters
    (:meth:`_complete`)."""

    __slots__ = (
        "_done",
        "_error",
        "_offset",
        "_owner",
        "_segment",
        "_waiter",
        "deadline",
        "headers",
        "order",
        "payload",
        "position",
        "size",
        "wire_key",
        "writer_ms",
    )

    def __init__(
        self,
        owner: Any,
        order: int,
        wire_key: str,
        payload: bytes,
        writer_ms: int,
        position: float,
        deadline: float,
        headers: bytes = b"",
    ) -> None:
        self._owner = owner  # what waiters need of the writer (see the subclasses)
        self._waiter: Any = None  # what a waiter left (see the subclasses); None: nobody
        self._done = False
        self._segment = -1
        self._offset = -1
        self._error: BaseException | None = None
        self.order = order
        self.wire_key = wire_key
        self.payload = payload
        self.headers = headers  # packed (readergroup.core.headers); b"": none
        self.size = len(payload) + len(headers)
        self.writer_ms = writer_ms
        self.position = position
        self.deadline = deadline  # the writer's monotonic clock: write time + delivery_timeout

    def done(self) -> bool:
        return self._done

    def _record(self, segment: int, offset: int, error: BaseException | None) -> None:
        """Record the outcome; the writer keeps no copy of an acknowledged or failed event."""
        self._segment, self._offset, self._error = segment, offset, error
        self.payload = self.headers = b""

    def _complete(self, segment: int, offset: int, error: BaseException | None) -> None:
        """Called by the sender only: record the outcome and tell the waiters."""
        self._record(segment, offset, error)
        self._done = True

    @staticmethod
    def _land(futures: Sequence[QueuedEvent], segment: int, first: int) -> tuple[int, int]:
        """Acknowledge ``futures``, landed in ``segment`` at offsets ``first``, ``first + 1``...
        (``first`` -1: offsets unknown); return how many were not done yet (one whose deadline
        passed while its batch was re-sent failed then, and stays failed) and their payload
        bytes. Called by the sender only."""
        count = size = 0
        offset = first
        for future in futures:
            if not future._done:
                count += 1
                size += future.size
                future._complete(segment, offset, None)
            if first >= 0:
                offset += 1
        return count, size


E = TypeVar("E", bound=QueuedEvent)

_POSITION: Callable[[QueuedEvent], float] = attrgetter("position")


@functools.lru_cache(maxsize=65536)
def cached_route(routing_key: str) -> tuple[float, str]:
    """A routing key's key-space position and its wire form (``"k" + key``)."""
    return key_position(routing_key), "k" + routing_key


# -- the steps a round asks its driver for -------------------------------------------------------
class FetchState(NamedTuple):
    """Send the stream's metadata (``refresh``: invalidate the cached copy first)."""

    refresh: bool


class SendBatches(NamedTuple):
    """Send ``segments.append(batches)``'s replies."""

    batches: list[AppendBatch]


class Pause(NamedTuple):
    """Wait ``seconds`` of the injected clock, then send ``None``."""

    seconds: float


Step = FetchState | SendBatches | Pause
Steps = Generator[Step, Any, None]


class RoundSender(Generic[T, E]):
    """What both writers share: how ``write_event`` checks and encodes an event, and how the
    sender drains the queue into rounds and delivers each (see the module docstring).

    The queue (``_queue``), the counters (``_outstanding``, ``_buffered``) and the first
    failure since the last flush are guarded by ``_accounting`` (a lock for the thread, a
    no-op for the task); :meth:`_released` is called with it held after events settle."""

    _accounting: AbstractContextManager[Any]
    _event_class: type[E]
    """The subclass's queued events."""
    _event_owner: Any
    """What its events' waiters need of it (:attr:`QueuedEvent._owner`)."""

    ROUND_BATCHES = 16
    """Most full batches in one round (one round trip): more amortise a round trip over more
    events; fewer keep each step of a round short."""

    def __init__(
        self,
        scope: str,
        stream: str,
        serializer: Serializer[T],
        config: EventWriterConfig | None,
        *,
        clock: Clock,
        wall_ms: Callable[[], int],
        max_event_size: int,
        rng: random.Random | None = None,
        writer_id: str | None = None,
    ) -> None:
        config = config or EventWriterConfig()
        rng = rng or random.Random()  # noqa: S311 (spreading keyless events)
        self._scope = scope
        self._stream = stream
        self._serializer = serializer
        self._config = config
        self._clock = clock
        self._monotonic = clock.monotonic
        self._delivery_timeout = config.delivery_timeout
        self._rng = rng
        self._wall_ms = wall_ms
        self.writer_id = writer_id or f"w-{uuid.uuid4().hex[:16]}"
        self._sequence = itertools.count(1)
        # segment -> (created_ms, highest tail acknowledged): a stored tail found behind it
        # (a lossy failover) is never reused (append_events.lua); sender only
        self._seen: dict[int, tuple[str, int]] = {}
        # batches acknowledged lately, put back where a lossy failover lost them; sender only
        self._acked = AcknowledgedBatches(
            window=config.replay_window, max_bytes=config.replay_bytes, clock=clock.monotonic
        )
        self._order = itertools.count()
        # events written and not yet taken by the sender; appended under _accounting, taken
        # whole by the sender (one swap, not one pop per event) into its own _backlog
        self._queue: list[E] = []
        self._max_in_flight = config.max_in_flight_bytes
        # sender only: _backlog's events from _backlog_next on are not sent yet (an index, not
        # a slice a round: a long backlog drains in linear time); [] once all are
        self._backlog: list[E] = []
        self._backlog_next = 0
        self._outstanding = 0
        self._buffered = 0
        self._failures: list[BaseException] = []
        self._max_event_size = max_event_size
        # each event fails by its own deadline (_wait_to_retry); a round's budget only backs
        # that up: its events were all written before it began, so all expire within it
        self._retry = RetryPolicy(
            max_attempts=100_000,
            deadline=config.delivery_timeout + 2 * MAX_DELAY,
            base_delay=0.005,
            max_delay=MAX_DELAY,
        )

    # -- write_event's checks ------------------------------------------------------------------
    def _new_event(self, event: T, routing_key: str | None, headers: Headers | None) -> E:
        """The queued event for ``event`` (of :attr:`_event_class`, owned by
        :attr:`_event_owner`), written now; raises (nothing queued) as ``write_event``
        documents."""
        payload = self._serializer.serialize(event)
        if type(payload) is not bytes:
            payload = self._bytes_of(payload, routing_key)
        size = len(payload)
        packed = b""
        if headers:
            packed = encode_headers(headers, self._event_name(routing_key))
            size += len(packed)
        if size > self._max_event_size:
            with_headers = f" ({len(packed)} of them headers)" if packed else ""
            raise EventTooLargeError(
                f"event of {size} bytes{with_headers} exceeds max_event_size "
                f"{self._max_event_size} of {self._scope}/{self._stream}; nothing was written"
            )
        if routing_key is None:
            position, wire = self._rng.random(), ""
        elif type(routing_key) is str:
            position, wire = cached_route(routing_key)
        else:
            raise TypeError(f"routing_key must be a str or None, got {type(routing_key).__name__}")
        return self._event_class(
            self._event_owner,
            next(self._order),
            wire,
            payload,
            self._wall_ms(),
            position,
            self._monotonic() + self._delivery_timeout,
            packed,
        )

    def _bytes_of(self, payload: object, routing_key: str | None) -> bytes:
        """What the serializer returned, if bytes-like, as bytes (a copy: the caller may reuse
        its buffer); else :class:`SerializationError`."""
        if isinstance(payload, (bytes, bytearray, memoryview)):
            return bytes(payload)
        hint = " (encode it in the serializer)" if isinstance(payload, str) else ""
        raise SerializationError(
            f"serializer {type(self._serializer).__name__} returned a "
            f"{type(payload).__name__}, not bytes{hint}, for the event with routing key "
            f"{routing_key!r} of {self._scope}/{self._stream}; nothing was written"
        )

    def _event_name(self, routing_key: str | None) -> str:
        return f"the event with routing key {routing_key!r} of {self._scope}/{self._stream}"

    def _no_room_error(self) -> WriteFailedError:
        return WriteFailedError(
            f"no room for the event within max_block={self._config.max_block}s "
            f"({self._buffered} bytes in flight)"
        )

    def _take_failure(self) -> BaseException | None:
        """The first failure since the last call (called with ``_accounting`` held)."""
        failures, self._failures = self._failures, []
        return failures[0] if failures else None

    # -- the sender ----------------------------------------------------------------------------
    def _drain(self) -> list[E]:
        """The next round: the oldest events written, at most :attr:`ROUND_BATCHES` full
        batches."""
        backlog, start = self._backlog, self._backlog_next
        if not backlog:
            with self._accounting:
                backlog, self._queue = self._queue, []
            start = 0
        end = start + self._config.max_batch_events * self.ROUND_BATCHES
        if end >= len(backlog):
            self._backlog, self._backlog_next = [], 0
            return backlog if start == 0 else backlog[start:]
        self._backlog, self._backlog_next = backlog, end
        return backlog[start:end]

    def round_steps(self, events: list[E]) -> Steps:
        """Deliver ``events`` (one drained round) until each is acknowledged or failed; an
        error that ends the round fails what is left of it."""
        try:
            yield from self._deliver(_Round(events), self._retry.start(self._clock, self._rng))
        except Exception as exc:  # fail what is left of the round; the sender lives on
            self._fail(events, exc)

    def _deliver(self, round_: _Round[E], budget: RetryBudget) -> Steps:
        """Route, send and settle until nothing is left. Every step that can fail for a while,
        the metadata refresh included, is retried until each event's deadline
        (:meth:`_wait_to_retry`); a batch that may have landed is re-sent as it was (same
        sequence number), never re-batched. A batch refused because a failover lost the
        segment's last appends (``REGRESSED``) waits for :meth:`_put_back`, then goes again at
        once (no backoff unless something else failed)."""
        route = round_.events
        pending: _Sent[E] = ([], [])
        refresh = False
        while route or pending[0]:
            try:
                if route:
                    state = self._checked((yield FetchState(refresh)))
                    batches, members = self._batches(state, route)
                    pending, route = (pending[0] + batches, pending[1] + members), []
                replies = yield SendBatches(pending[0])
            except ReaderGroupError as exc:
                if not worth_retrying(exc):
                    raise
                route, pending = yield from self._wait_to_retry(budget, exc, round_, route, pending)
                continue
            left = self._settle(*pending, replies)
            route, pending, refresh = left.reroute, left.resend, bool(left.reroute)
            if left.regressed:
                pending, cause = yield from self._put_back(left.regressed, pending)
                left.cause = left.cause or cause
                if not (route or left.cause):
                    continue  # put back: send the refused batches again at once
            if route or pending[0]:
                route, pending = yield from self._wait_to_retry(
                    budget, left.cause, round_, route, pending
                )

    def _put_back(
        self, regressed: dict[int, int], pending: _Sent[E]
    ) -> Generator[Step, Any, tuple[_Sent[E], ReaderGroupError | None]]:
        """A failover lost appends of segments ``regressed`` (segment -> the stored tail,
        behind what this writer saw acknowledged): append again, unchanged and in order, the
        batches this writer still holds that chain from that tail (see
        :mod:`readergroup.client.replay`), each segment's in one pipelined round: once one is
        refused (not where it was any more) the later ones are too, since each must begin
        where the one before ends and under the epoch no other append has changed. Then the
        batches refused for it (in ``pending``) go again without ``report_regression``: what
        was not put back is recorded lost by the script. A retriable error leaves a segment to
        the next round (returned as the cause to back off for)."""
        finished: set[int] = set()
        cause: ReaderGroupError | None = None
        for segment, tail in regressed.items():
            seen = self._seen.get(segment, ("", 0))[1]
            put_back = tail
            try:
                chain = self._acked.replays(segment, tail=tail, seen=seen)
                replies = (yield SendBatches(chain)) if chain else []
                for batch, reply in zip(chain, replies, strict=True):
                    if reply.error is not None and worth_retrying(reply.error):
                        raise reply.error
                    if reply.status == segment_status.OK:
                        put_back = max(put_back, reply.first_offset + batch.count)
            except ReaderGroupError as exc:
                if not worth_retrying(exc):
                    raise
                cause = exc
                logger.warning(
                    "writer of %s/%s: putting back acknowledged events a failover lost in "
                    "segment %d failed; trying again",
                    self._scope,
                    self._stream,
                    segment,
                    exc_info=exc,
                )
                continue
            finished.add(segment)
            logger.warning(
                "writer of %s/%s: a failover lost offsets %d..%d of segment %d; put back "
                "%d acknowledged events of this writer there, unchanged%s",
                self._scope,
                self._stream,
                tail,
                seen - 1,
                segment,
                put_back - tail,
                ""
                if put_back >= seen
                else f"; offsets {put_back}..{seen - 1} are recorded lost (not held any more, "
                "or another writer's)",
            )
        batches = [
            replace(batch, report_regression=False) if batch.segment in finished else batch
            for batch in pending[0]
        ]
        return (batches, pending[1]), cause

    def _wait_to_retry(
        self,
        budget: RetryBudget,
        cause: BaseException | None,
        round_: _Round[E],
        route: list[E],
        pending: _Sent[E],
    ) -> Generator[Step, Any, tuple[list[E], _Sent[E]]]:
        """Back off before the next attempt; meanwhile fail each event whose deadline passes,
        of this round or queued behind it, at that deadline. Return what is left to route
        and to send again: events failed here are dropped from ``route``; a batch that may
        have landed goes again unchanged while any of its events is still due (the failed
        ones stay failed if it lands: :meth:`QueuedEvent._land`)."""
        delay = budget.next_delay()
        if delay is None:  # a backstop: every event of the round expires before this
            raise self._expired_error(cause, None)
        if cause is not None and budget.attempts == 2:  # once per round, not per attempt
            logger.warning(
                "writer of %s/%s: retrying until each event's delivery_timeout=%ss after: %s",
                self._scope,
                self._stream,
                self._config.delivery_timeout,
                cause,
                exc_info=cause,
            )
        clock = self._clock
        wake = clock.monotonic() + delay
        while True:
            now = clock.monotonic()
            due = min(self._expire_round(round_, now, cause), self._expire_waiting(now, cause))
            if round_.finished() or now >= wake:
                break
            yield Pause(min(wake, due) - now)
        route = [event for event in route if not event._done]
        kept = [i for i, group in enumerate(pending[1]) if not all(e._done for e in group)]
        return route, ([pending[0][i] for i in kept], [pending[1][i] for i in kept])

    def _expire_round(self, round_: _Round[E], now: float, cause: BaseException | None) -> float:
        """Fail the round's events whose deadline is at or before ``now``; return the next
        deadline of the round (``inf``: none left)."""
        events, start = round_.events, round_.expired
        end = start
        while end < len(events) and (events[end].deadline <= now or events[end]._done):
            end += 1
        round_.expired = end
        if end > start:
            self._expire(events[start:end], cause)
        return events[end].deadline if end < len(events) else NEVER

    def _expire_waiting(self, now: float, cause: BaseException | None) -> float:
        """Fail the events queued behind the round (the backlog's rest, then the queue) whose
        deadline is at or before ``now``, and take them out; return the next deadline
        (``inf``: none waiting). Both are in write order, so the expired ones come first."""
        backlog, start = self._backlog, self._backlog_next
        end = start
        while end < len(backlog) and backlog[end].deadline <= now:
            end += 1
        expired = backlog[start:end]
        if end >= len(backlog):
            self._backlog, self._backlog_next = [], 0
        else:
            self._backlog_next = end
        due = NEVER if end >= len(backlog) else backlog[end].deadline
        with self._accounting:
            queue = self._queue
            count = 0
            while count < len(queue) and queue[count].deadline <= now:
                count += 1
            if count:
                expired += queue[:count]
                del queue[:count]
            if queue and due == NEVER:
                due = queue[0].deadline
        if expired:
            self._expire(expired, cause)
        return due

    def _expire(self, events: list[E], cause: BaseException | None) -> None:
        """Fail ``events`` (those not done yet), each with its own deadline."""
        unfinished = [event for event in events if not event._done]
        for event in unfinished:
            event._complete(-1, -1, self._expired_error(cause, event.deadline))
        if unfinished:
            self._record_failure(unfinished[0]._error)
            self._release(len(unfinished), sum(event.size for event in unfinished))
            self._wake_waiters()

    def _expired_error(self, cause: BaseException | None, deadline: float | None) -> Exception:
        if cause is None:
            return StreamSealedError(
                f"segments of {self._scope}/{self._stream} stayed sealed without successors "
                f"for delivery_timeout={self._config.delivery_timeout}s"
            )
        error = WriteFailedError(
            f"event not acknowledged within delivery_timeout={self._config.delivery_timeout}s"
            f" of its write: {cause}",
            deadline=deadline,
        )
        error.__cause__ = cause
        return error

    def _checked(self, state: StreamState) -> StreamState:
        """The stream's metadata, refused if the stream is sealed; its event size limit is
        the one ``write_event`` checks from now on."""
        if state.sealed:
            raise StreamSealedError(f"stream {self._scope}/{self._stream} is sealed")
        self._max_event_size = state.config.max_event_size
        return state

    def _batches(
        self, state: StreamState, events: list[E]
    ) -> tuple[list[AppendBatch], list[list[E]]]:
        groups = state.range_map().group(events, _POSITION)
        batches: list[AppendBatch] = []
        members: list[list[E]] = []
        size = self._config.max_batch_events
        for segment, group in groups.items():
            created, seen = self._seen.get(segment, ("", 0))
            for start in range(0, len(group), size):
                chunk = group[start : start + size]
                args: list[Any] = list(chain.from_iterable(map(_event_args, chunk)))
                batches.append(
                    AppendBatch(
                        self._scope,
                        self._stream,
                        segment,
                        self.writer_id,
                        next(self._sequence),
                        len(chunk),
                        args,
                        self._max_event_size,
                        seen,
                        created,
                        report_regression=self._acked.enabled,
                    )
                )
                members.append(chunk)
        return batches, members

    def _settle(
        self, batches: list[AppendBatch], members: list[list[E]], replies: list[Any]
    ) -> _Left[E]:
        """Settle each batch on its own reply: acknowledge what landed, fail what was refused
        for good (naming its segment); return what is left to route or send again."""
        left: _Left[E] = _Left([], ([], []), None)
        for batch, group, reply in zip(batches, members, replies, strict=True):
            error = reply.error
            if reply.status == segment_status.SEALED or isinstance(error, SegmentNotFoundError):
                left.reroute.extend(group)  # stale metadata (a scale, or a re-created stream)
                left.cause = error or left.cause
            elif reply.status == segment_status.REGRESSED:
                left.regressed[batch.segment] = reply.tail  # nothing written: put back first
                left.resend[0].append(batch)
                left.resend[1].append(group)
            elif error is None:
                self._acknowledge(batch, group, reply)
            elif error.retriable:  # a server-wide condition, so later batches got it too
                left.resend[0].append(batch)
                left.resend[1].append(group)
                left.cause = error
            else:
                self._fail(group, error)
        # re-routed events keep their queue order; a sealed segment refuses every later batch
        # too, so no event of a key can overtake an earlier one of the same key
        left.reroute.sort(key=lambda event: event.order)
        return left

    def _acknowledge(self, batch: AppendBatch, group: list[E], reply: AppendReply) -> None:
        segment = batch.segment
        if reply.status == segment_status.OK:
            first = reply.first_offset
            tail = first + len(group)
            created, seen = self._seen.get(segment, ("", 0))
            if reply.created and (reply.created != created or tail > seen):
                self._seen[segment] = (reply.created, tail)
            count, size = QueuedEvent._land(group, segment, first)
            self._acked.keep(
                batch,
                first_offset=first,
                epoch=reply.epoch,
                server_ms=reply.server_ms,
                created=reply.created,
                size=size,
            )
        else:  # DUPLICATE: an earlier try landed; its offsets are not known here
            count, size = QueuedEvent._land(group, segment, -1)
        self._release(count, size)

    def _fail(self, events: list[E], error: BaseException) -> None:
        if not isinstance(error, ReaderGroupError):
            wrapped = WriteFailedError(f"writer failed: {error!r}")
            wrapped.__cause__ = error
            error = wrapped
        unfinished = [event for event in events if not event.done()]
        released = sum(event.size for event in unfinished)
        for event in unfinished:
            event._complete(-1, -1, error)
        self._record_failure(error)
        self._release(len(unfinished), released)

    def _record_failure(self, error: BaseException | None) -> None:
        """Keep the first failure since the last flush, for it to raise."""
        with self._accounting:
            if error is not None and not self._failures:
                self._failures.append(error)

    def _release(self, count: int, size: int) -> None:
        with self._accounting:
            self._outstanding -= count
            self._buffered -= size
            self._released()

    def _released(self) -> None:
        """Events settled (called with ``_accounting`` held): wake whoever waits for room or
        for the writer to be idle."""
        raise NotImplementedError  # each sender's own

    def _wake_waiters(self) -> None:
        """Events failed while a round waits to be retried: wake whoever waits for one."""


_event_args = attrgetter("wire_key", "payload", "writer_ms", "headers")
"""An event's part of a batch's ``event_args``."""

_Sent = tuple[list[AppendBatch], list[list[E]]]
"""Batches and, for each, the events it carries."""


@dataclass(slots=True)
class _Round(Generic[E]):
    """The events of one round, in write order (so in deadline order), and how many of them,
    from the first, are done or have had their deadline pass."""

    events: list[E]
    expired: int = 0

    def finished(self) -> bool:
        return self.expired >= len(self.events)


NEVER = float("inf")
MAX_DELAY = 1.0  # longest backoff between two attempts at a round, seconds


@dataclass(slots=True)
class _Left(Generic[E]):
    """What a round's replies leave to do."""

    reroute: list[E]  # sealed or missing segments: route again on fresh metadata
    resend: _Sent[E]  # refused with a retriable error (or REGRESSED): send again
    cause: BaseException | None  # why (None: sealed or regressed segments only)
    regressed: dict[int, int] = field(default_factory=dict)  # segment -> stored tail


def worth_retrying(error: ReaderGroupError) -> bool:
    """A transient error, or a stream not found on refresh: it may be being re-created after
    Redis lost it (as Kafka producers retry an unknown topic within their delivery timeout)."""
    return error.retriable or isinstance(error, StreamNotFoundError)
