"""``EventStreamWriter``: routes, batches and pipelines events into a stream's segments.

Life of an event: ``write_event`` serializes it, checks its size, picks its key-space position
(the routing key's hash; a random one for events without a key) and queues it, returning a
:class:`WriteFuture`. One background thread drains the queue: it routes each event to the
active segment owning its position, groups events per segment in queue order, and sends every
group as one idempotent script call, all groups of a round in one pipelined round trip.

Guarantees:

* **Per-key order.** Events of one routing key written by one writer land in write order,
  also across scaling: a batch bound for a sealed segment is refused whole by the script, and
  its events, with any later ones for that segment, are re-routed (metadata refreshed) to the
  successors in their original order.
* **No duplicates from retries.** Each batch carries ``(writer id, sequence)``; a re-send after
  a lost reply or an outage is recognised by the script and not written again.
* **Bounded memory.** At most ``max_in_flight_bytes`` of payload is queued or in flight;
  ``write_event`` blocks up to ``max_block`` seconds for room, then raises.
* **Bounded delivery, per event.** Sending is retried (jittered backoff), the metadata
  refresh included (an outage with expired metadata is retried like one with fresh metadata;
  a stream not found is retried too: it may be being re-created), until each event's own
  deadline: its write time plus ``delivery_timeout``. An event still unacknowledged then
  fails with :class:`~readergroup.core.errors.WriteFailedError` carrying that ``deadline``,
  whether it was in the round being retried or queued behind it; so ``flush()`` and
  ``close()`` of a writer whose Redis is gone return by the last event's deadline.
* **Only bytes go out.** ``write_event`` checks what the serializer returned: bytes-like
  values are stored as their bytes, anything else (a ``str`` included: encode it in the
  serializer) raises :class:`~readergroup.core.errors.SerializationError` there, naming the
  serializer and the routing key; a bad event never reaches a round, so it fails no other.
* **A future fails only if its event is not in Redis.** Every batch settles on its own reply:
  a batch the server refuses for good (a key of the wrong type, say) fails its own events
  with an error naming the segment; the other batches of the round are unaffected.

Who may call what: any thread of the process that created the writer may call
``write_event``, ``flush`` and ``close``. A copy made by ``fork()`` has no sender thread: in the
child, ``write_event`` and ``flush`` raise :class:`~readergroup.core.errors.WriterForkedError`
(create the writer in the child) and ``close()`` only discards the copy.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import chain
from operator import attrgetter
from typing import Any, Generic, TypeVar

from readergroup.client.metadata_cache import StreamMetadataCache
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
    WriterClosedError,
    WriterForkedError,
)
from readergroup.core.headers import Headers, encode_headers
from readergroup.core.routing import key_position
from readergroup.core.stream_metadata import StreamState
from readergroup.storage import segment_status
from readergroup.storage.connection_api import Connection
from readergroup.storage.segment_records import AppendBatch, AppendReply
from statesync import RetryPolicy
from statesync.clock import Clock
from statesync.retry import RetryBudget
from statesync.system_clock import SYSTEM_CLOCK

logger = logging.getLogger(__name__)

T = TypeVar("T")
MiB = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class EventWriterConfig:
    """Writer settings.

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


class WriteFuture:
    """The outcome of one ``write_event``: resolves to an :class:`EventPointer` once the event
    is in Redis, or to the error that stopped it. ``result``, ``exception``, ``done`` and
    ``add_done_callback`` behave as in :mod:`concurrent.futures`.

    It is also the queued event itself (one small object per event keeps ``write_event``
    cheap); its :class:`EventPointer` is built when asked for. After a retry whose first try
    had landed, the pointer's offset is ``-1`` (the script reports only that the batch is
    already in)."""

    __slots__ = (
        "_callbacks",
        "_completed",
        "_done",
        "_error",
        "_offset",
        "_segment",
        "deadline",
        "headers",
        "order",
        "payload",
        "position",
        "size",
        "wire_key",
        "writer_ms",
    )

    _callback_lock = threading.Lock()

    def __init__(
        self,
        completed: threading.Condition,
        order: int,
        wire_key: str,
        payload: bytes,
        writer_ms: int,
        position: float,
        deadline: float,
        headers: bytes = b"",
    ) -> None:
        self._completed = completed
        self._done = False
        self._segment = -1
        self._offset = -1
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[WriteFuture], Any]] | None = None
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

    def _wait(self, timeout: float | None) -> None:
        if self._done:
            return
        with self._completed:
            if not self._completed.wait_for(lambda: self._done, timeout):
                raise TimeoutError("the event was not acknowledged in time")

    def result(self, timeout: float | None = None) -> EventPointer:
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return EventPointer(self._segment, self._offset)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def add_done_callback(self, callback: Callable[[WriteFuture], Any]) -> None:
        with self._callback_lock:
            if not self._done:
                self._callbacks = [*(self._callbacks or []), callback]
                return
        self._call(callback)

    def _call(self, callback: Callable[[WriteFuture], Any]) -> None:
        """Run a user callback; its error is logged, never raised (as :mod:`concurrent.futures`
        does): it must not kill the sender."""
        try:
            callback(self)
        except Exception as exc:
            logger.warning("write callback %r raised: %s", callback, exc, exc_info=exc)

    def _complete(self, segment: int, offset: int, error: BaseException | None) -> None:
        """Called by the sender only; waiters are woken by its notify at the end of a round. A
        future without callbacks (the usual one) is completed without taking the lock."""
        self._segment, self._offset, self._error = segment, offset, error
        self.payload = self.headers = b""  # acknowledged or failed: the writer keeps no copy
        if self._callbacks is None:
            self._done = True
            return
        with self._callback_lock:
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            self._call(callback)

    @staticmethod
    def _land(futures: list[WriteFuture], segment: int, first: int) -> tuple[int, int]:
        """Acknowledge ``futures``, landed in ``segment`` at offsets ``first``, ``first + 1``...
        (``first`` -1: offsets unknown); return how many were not done yet (one whose deadline
        passed while its batch was re-sent failed then, and stays failed) and their payload
        bytes. Called by the sender only (see :meth:`_complete`)."""
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


_POSITION: Callable[[WriteFuture], float] = attrgetter("position")


@functools.lru_cache(maxsize=65536)
def _cached_route(routing_key: str) -> tuple[float, str]:
    """A routing key's key-space position and its wire form (``"k" + key``)."""
    return key_position(routing_key), "k" + routing_key


class EventStreamWriter(Generic[T]):
    """Writes events of type ``T`` to one stream. Create with
    :meth:`EventStreamClientFactory.create_event_writer`."""

    def __init__(
        self,
        connection: Connection,
        metadata: StreamMetadataCache,
        scope: str,
        stream: str,
        serializer: Serializer[T],
        config: EventWriterConfig | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
        writer_id: str | None = None,
    ) -> None:
        self._connection = connection
        self._metadata = metadata
        self._scope = scope
        self._stream = stream
        self._serializer = serializer
        self._config = config or EventWriterConfig()
        self._clock = clock or SYSTEM_CLOCK
        # (the system clock's own function: one call less per event than through the clock)
        self._monotonic = time.monotonic if clock is None else self._clock.monotonic
        self._delivery_timeout = self._config.delivery_timeout
        self._rng = rng or random.Random()  # noqa: S311 (spreading keyless events)
        self._wall_ms = wall_clock_ms or _wall_clock_ms
        self.writer_id = writer_id or f"w-{uuid.uuid4().hex[:16]}"
        self._sequence = itertools.count(1)
        # segment -> (created_ms, highest tail acknowledged): a stored tail found behind it
        # (a lossy failover) is never reused (append_events.lua); sender thread only
        self._seen: dict[int, tuple[str, int]] = {}
        # batches acknowledged lately, put back where a lossy failover lost them; sender only
        self._acked = AcknowledgedBatches(
            window=self._config.replay_window,
            max_bytes=self._config.replay_bytes,
            clock=self._clock.monotonic,
        )
        self._order = itertools.count()
        # events written and not yet taken by the sender; appended under _accounting, taken
        # whole by the sender (one swap, not one pop per event) into its own _backlog
        self._queue: list[WriteFuture] = []
        self._max_in_flight = self._config.max_in_flight_bytes
        # sender thread only: _backlog's events from _backlog_next on are not sent yet (an
        # index, not a slice a round: a long backlog drains in linear time); [] once all are
        self._backlog: list[WriteFuture] = []
        self._backlog_next = 0
        self._wakeup = threading.Event()
        # _accounting guards _outstanding and _buffered; _idle/_room wait on it
        self._accounting = threading.Lock()
        self._idle = threading.Condition(self._accounting)
        self._room = threading.Condition(self._accounting)
        self._outstanding = 0
        self._buffered = 0
        self._completed = threading.Condition()
        self._closed = False
        self._pid = os.getpid()  # a copy in a forked child is unusable (_after_fork_in_child)
        _LIVE_WRITERS.add(self)
        self._failures: list[BaseException] = []
        self._max_event_size = metadata.get(scope, stream).config.max_event_size
        # each event fails by its own deadline (_wait_to_retry); a round's budget only backs
        # that up: its events were all written before it began, so all expire within it
        self._retry = RetryPolicy(
            max_attempts=100_000,
            deadline=self._config.delivery_timeout + 2 * _MAX_DELAY,
            base_delay=0.005,
            max_delay=_MAX_DELAY,
        )
        self._sender = threading.Thread(
            target=self._run, name=f"rg-writer-{scope}/{stream}", daemon=True
        )
        self._sender.start()

    # -- public API -------------------------------------------------------------------------
    def write_event(
        self,
        event: T,
        routing_key: str | None = None,
        *,
        headers: Headers | None = None,
    ) -> WriteFuture:
        """Queue ``event``; the future resolves once it is in Redis.

        ``headers``: per-event metadata handed to readers as ``EventRead.headers`` (string
        keys, bytes values; at most
        :data:`~readergroup.core.headers.MAX_HEADERS` of them and
        :data:`~readergroup.core.headers.MAX_HEADERS_BYTES` packed; they count against the
        stream's ``max_event_size`` together with the payload). An event without headers is
        stored exactly as before headers existed.

        Raises at once (nothing queued) on a serialization error or a serializer returning
        anything but a bytes-like value (:class:`SerializationError`; also for a header key
        that is not a non-empty ``str`` or a value that is not bytes-like, naming the header),
        an event over the stream's ``max_event_size`` or headers over their bounds
        (:class:`EventTooLargeError`), a closed writer
        (:class:`WriterClosedError`; :class:`WriterForkedError` in a process forked from the
        one that created it), or when no room frees up within ``max_block``
        (:class:`WriteFailedError`).
        """
        if self._closed:
            raise self._closed_error()
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
            position, wire = _cached_route(routing_key)
        else:
            raise TypeError(f"routing_key must be a str or None, got {type(routing_key).__name__}")
        future = WriteFuture(
            self._completed,
            next(self._order),
            wire,
            payload,
            self._wall_ms(),
            position,
            self._monotonic() + self._delivery_timeout,
            packed,
        )
        with self._accounting:
            if self._buffered + size > self._max_in_flight and self._buffered:
                self._wait_for_room(size)
            self._outstanding += 1
            self._buffered += size
            queue = self._queue
            queue.append(future)
            first = len(queue) == 1
        if first:  # the sender takes the queue whole, so only its first event must wake it
            self._wakeup.set()
        return future

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

    def _closed_error(self) -> WriterClosedError:
        if os.getpid() != self._pid:
            return WriterForkedError(
                f"the writer of {self._scope}/{self._stream} was created in process "
                f"{self._pid} and copied into process {os.getpid()} by fork(); it cannot send "
                "from here: create the writer in the child (after the fork)"
            )
        return WriterClosedError("the writer is closed")

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every event written so far is acknowledged or failed; raise the first
        failure since the previous flush. Returns by the last event's deadline at the latest
        (its write time + ``delivery_timeout``), or raises ``TimeoutError`` after ``timeout``
        seconds. Raises :class:`WriterForkedError` in a forked child."""
        if os.getpid() != self._pid:
            raise self._closed_error()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            while self._outstanding:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"{self._outstanding} events still unacknowledged")
                self._idle.wait(remaining)
            failures, self._failures = self._failures, []
        if failures:
            raise failures[0]

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender. Idempotent. In a process forked from the one that
        created the writer, only marks this copy closed, at once: what was written before the
        fork is the parent's writer's to send."""
        if os.getpid() != self._pid:
            self._closed = True
            return
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self._wakeup.set()
            self._sender.join(10)

    def __enter__(self) -> EventStreamWriter[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- sender -----------------------------------------------------------------------------
    def _wait_for_room(self, size: int) -> None:
        """Called with ``_accounting`` held."""
        deadline = time.monotonic() + self._config.max_block
        while self._buffered + size > self._max_in_flight and self._buffered:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WriteFailedError(
                    f"no room for the event within max_block={self._config.max_block}s "
                    f"({self._buffered} bytes in flight)"
                )
            self._room.wait(remaining)

    def _run(self) -> None:
        while True:
            self._wakeup.wait()
            if self._config.linger:
                self._clock.sleep(self._config.linger)
            self._wakeup.clear()
            while self._queue or self._backlog:
                self._send_round()
            if self._closed and not self._queue:
                return

    def _drain(self) -> list[WriteFuture]:
        """The next round: the oldest events written, at most 16 full batches."""
        backlog, start = self._backlog, self._backlog_next
        if not backlog:
            with self._accounting:
                backlog, self._queue = self._queue, []
            start = 0
        end = start + self._config.max_batch_events * 16
        if end >= len(backlog):
            self._backlog, self._backlog_next = [], 0
            return backlog if start == 0 else backlog[start:]
        self._backlog, self._backlog_next = backlog, end
        return backlog[start:end]

    def _send_round(self) -> None:
        """Send one drained round until every event in it is acknowledged or failed."""
        events = self._drain()
        try:
            self._deliver(_Round(events), self._retry.start(self._clock, self._rng))
        except BaseException as exc:  # fail what is left of the round; the sender lives on
            self._fail(events, exc)
        finally:
            with self._completed:
                self._completed.notify_all()

    def _deliver(self, round_: _Round, budget: RetryBudget) -> None:
        """Route, send and settle until nothing is left. Every step that can fail for a while,
        the metadata refresh included, is retried until each event's deadline
        (:meth:`_wait_to_retry`); a batch that may have landed is re-sent as it was (same
        sequence number), never re-batched. A batch refused because a failover lost the
        segment's last appends (``REGRESSED``) waits for :meth:`_put_back`, then goes again at
        once (no backoff unless something else failed)."""
        route = round_.events
        pending: _Sent = ([], [])
        refresh = False
        while route or pending[0]:
            try:
                if route:
                    batches, members = self._batches(self._state(refresh), route)
                    pending, route = (pending[0] + batches, pending[1] + members), []
                replies = self._connection.segments.append(pending[0])
            except ReaderGroupError as exc:
                if not _worth_retrying(exc):
                    raise
                route, pending = self._wait_to_retry(budget, exc, round_, route, pending)
                continue
            left = self._settle(*pending, replies)
            route, pending, refresh = left.reroute, left.resend, bool(left.reroute)
            if left.regressed:
                pending, cause = self._put_back(left.regressed, pending)
                left.cause = left.cause or cause
                if not (route or left.cause):
                    continue  # put back: send the refused batches again at once
            if route or pending[0]:
                route, pending = self._wait_to_retry(budget, left.cause, round_, route, pending)

    def _put_back(
        self, regressed: dict[int, int], pending: _Sent
    ) -> tuple[_Sent, ReaderGroupError | None]:
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
                replies = self._connection.segments.append(chain) if chain else []
                for batch, reply in zip(chain, replies, strict=True):
                    if reply.error is not None and _worth_retrying(reply.error):
                        raise reply.error
                    if reply.status == segment_status.OK:
                        put_back = max(put_back, reply.first_offset + batch.count)
            except ReaderGroupError as exc:
                if not _worth_retrying(exc):
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
        round_: _Round,
        route: list[WriteFuture],
        pending: _Sent,
    ) -> tuple[list[WriteFuture], _Sent]:
        """Back off before the next attempt; meanwhile fail each event whose deadline passes,
        of this round or queued behind it, at that deadline. Return what is left to route
        and to send again: events failed here are dropped from ``route``; a batch that may
        have landed goes again unchanged while any of its events is still due (the failed
        ones stay failed if it lands: :meth:`WriteFuture._land`)."""
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
            clock.sleep(min(wake, due) - now)
        route = [event for event in route if not event._done]
        kept = [i for i, group in enumerate(pending[1]) if not all(e._done for e in group)]
        return route, ([pending[0][i] for i in kept], [pending[1][i] for i in kept])

    def _expire_round(self, round_: _Round, now: float, cause: BaseException | None) -> float:
        """Fail the round's events whose deadline is at or before ``now``; return the next
        deadline of the round (``inf``: none left)."""
        events, start = round_.events, round_.expired
        end = start
        while end < len(events) and (events[end].deadline <= now or events[end]._done):
            end += 1
        round_.expired = end
        if end > start:
            self._expire(events[start:end], cause)
        return events[end].deadline if end < len(events) else _NEVER

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
        due = _NEVER if end >= len(backlog) else backlog[end].deadline
        with self._accounting:
            queue = self._queue
            count = 0
            while count < len(queue) and queue[count].deadline <= now:
                count += 1
            if count:
                expired += queue[:count]
                del queue[:count]
            if queue and due == _NEVER:
                due = queue[0].deadline
        if expired:
            self._expire(expired, cause)
        return due

    def _expire(self, events: list[WriteFuture], cause: BaseException | None) -> None:
        """Fail ``events`` (those not done yet), each with its own deadline, and wake whoever
        waits for them."""
        unfinished = [event for event in events if not event._done]
        for event in unfinished:
            event._complete(-1, -1, self._expired_error(cause, event.deadline))
        if unfinished:
            self._record_failure(unfinished[0]._error)
            self._release(len(unfinished), sum(event.size for event in unfinished))
            with self._completed:
                self._completed.notify_all()

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

    def _state(self, refresh: bool) -> StreamState:
        if refresh:
            self._metadata.invalidate(self._scope, self._stream)
        state = self._metadata.get(self._scope, self._stream)
        if state.sealed:
            raise StreamSealedError(f"stream {self._scope}/{self._stream} is sealed")
        self._max_event_size = state.config.max_event_size
        return state

    def _batches(
        self, state: StreamState, events: list[WriteFuture]
    ) -> tuple[list[AppendBatch], list[list[WriteFuture]]]:
        groups = state.range_map().group(events, _POSITION)
        batches: list[AppendBatch] = []
        members: list[list[WriteFuture]] = []
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
        self, batches: list[AppendBatch], members: list[list[WriteFuture]], replies: list[Any]
    ) -> _Left:
        """Settle each batch on its own reply: acknowledge what landed, fail what was refused
        for good (naming its segment); return what is left to route or send again."""
        left = _Left([], ([], []), None)
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

    def _acknowledge(
        self, batch: AppendBatch, group: list[WriteFuture], reply: AppendReply
    ) -> None:
        segment = batch.segment
        if reply.status == segment_status.OK:
            first = reply.first_offset
            tail = first + len(group)
            created, seen = self._seen.get(segment, ("", 0))
            if reply.created and (reply.created != created or tail > seen):
                self._seen[segment] = (reply.created, tail)
            count, size = WriteFuture._land(group, segment, first)
            self._acked.keep(
                batch,
                first_offset=first,
                epoch=reply.epoch,
                server_ms=reply.server_ms,
                created=reply.created,
                size=size,
            )
        else:  # DUPLICATE: an earlier try landed; its offsets are not known here
            count, size = WriteFuture._land(group, segment, -1)
        self._release(count, size)

    def _fail(self, events: list[WriteFuture], error: BaseException) -> None:
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
            if not self._outstanding:
                self._idle.notify_all()
            self._room.notify_all()


_event_args = attrgetter("wire_key", "payload", "writer_ms", "headers")
"""An event's part of a batch's ``event_args``."""

_Sent = tuple[list[AppendBatch], list[list[WriteFuture]]]
"""Batches and, for each, the events it carries."""


@dataclass(slots=True)
class _Round:
    """The events of one round, in write order (so in deadline order), and how many of them,
    from the first, are done or have had their deadline pass."""

    events: list[WriteFuture]
    expired: int = 0

    def finished(self) -> bool:
        return self.expired >= len(self.events)


_NEVER = float("inf")
_MAX_DELAY = 1.0  # longest backoff between two attempts at a round, seconds

_LIVE_WRITERS: weakref.WeakSet[EventStreamWriter[Any]] = weakref.WeakSet()
"""Every writer of this process, to mark its copies in a forked child unusable."""


def _after_fork_in_child() -> None:
    """A forked child's copies of its parent's writers have no sender thread: mark them
    closed, so that ``write_event`` raises there (:class:`WriterForkedError`, told by the
    pid) at no cost per event in the parent."""
    for writer in list(_LIVE_WRITERS):
        writer._closed = True


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(slots=True)
class _Left:
    """What a round's replies leave to do."""

    reroute: list[WriteFuture]  # sealed or missing segments: route again on fresh metadata
    resend: _Sent  # refused with a retriable error (or REGRESSED): send again
    cause: BaseException | None  # why (None: sealed or regressed segments only)
    regressed: dict[int, int] = field(default_factory=dict)  # segment -> stored tail


def _worth_retrying(error: ReaderGroupError) -> bool:
    """A transient error, or a stream not found on refresh: it may be being re-created after
    Redis lost it (as Kafka producers retry an unknown topic within their delivery timeout)."""
    return error.retriable or isinstance(error, StreamNotFoundError)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)
