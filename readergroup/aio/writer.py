"""``AsyncEventStreamWriter``: the asyncio writer. Routes, batches and pipelines events into a
stream's segments exactly as the threaded
:class:`~readergroup.client.writer.EventStreamWriter` does, with a task of the event loop in
place of the sender thread; no thread anywhere.

Life of an event: ``send`` checks and encodes it (the threaded writer's checks: serializer
output, size, headers, routing key), waits (awaits) for room under ``max_in_flight_bytes``
and queues it, returning an :class:`AsyncWriteFuture`; ``write_event`` does the same and awaits
that future. The sender task drains the queue in rounds and delivers each through the same
decisions as the sender thread (:mod:`readergroup.client.write_rounds`: routing per segment,
one idempotent ``append_events.lua`` call per batch, all batches of a round in one round trip,
retries with backoff until each event's deadline, re-routing after a scale, put-back after a
lossy failover), awaiting where the thread blocks.

Guarantees, errors and logging are the threaded writer's (see its module): per-key order,
no duplicates from retries (writer id and sequence), bounded memory, bounded delivery per
event (``delivery_timeout``, :class:`~readergroup.core.errors.WriteFailedError` carrying the
deadline), :class:`~readergroup.core.errors.StreamSealedError`,
:class:`~readergroup.core.errors.EventTooLargeError`,
:class:`~readergroup.core.errors.SerializationError`,
:class:`~readergroup.core.errors.WriterClosedError`.

**Order of concurrent writers.** Events are queued in the order the ``send`` and
``write_event`` calls began, also when some wait for room under ``max_in_flight_bytes``
(they wait in line: a later small event does not overtake an earlier large one), so per-key
order holds across the tasks of one writer too.

**Cancellation.** Cancelling a task awaiting ``write_event`` or ``send`` never cancels the
write: once the call began and its checks passed, the event is written exactly once, in its
place in the order (or fails as it would have, its error raised by the next ``flush``),
whatever happens to the task awaiting it; a task cancelled while its event waits for room
leaves the event in line. Only ``max_block`` passing takes an event out of line unwritten
(:class:`~readergroup.core.errors.WriteFailedError`). Cancelling the future ``send``
returned only drops interest in the outcome.

Who may call what: one event loop (the one the writer was created on) and any of its tasks.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Generator
from contextlib import nullcontext
from typing import Any, Generic, TypeVar

from readergroup.aio.metadata import AsyncStreamStates
from readergroup.client.serializers import Serializer
from readergroup.client.write_rounds import (
    EventPointer,
    EventWriterConfig,
    FetchState,
    Pause,
    QueuedEvent,
    RoundSender,
    SendBatches,
    Step,
)
from readergroup.client.writer import wall_clock_ms_now
from readergroup.core.errors import WriterClosedError
from readergroup.core.headers import Headers
from readergroup.core.steps import StepDriver
from readergroup.storage.aio_connection_api import AsyncConnectionApi
from statesync.clock import Clock

log = logging.getLogger(__name__)

T = TypeVar("T")


class AsyncWriteFuture(QueuedEvent):
    """The outcome of one ``send``: awaiting it returns the :class:`EventPointer` once the
    event is in Redis, or raises the error that stopped it. ``done()``, ``result()`` and
    ``exception()`` behave as an :class:`asyncio.Future`'s (``result()`` before it is done
    raises :class:`asyncio.InvalidStateError`); :meth:`as_future` gives an
    :class:`asyncio.Future` of the same outcome, for ``asyncio.wait`` or callbacks.

    It is also the queued event itself (one small object per event keeps ``send`` cheap): no
    :class:`asyncio.Future` is made unless someone awaits it before it is done. Awaiting it
    from a task that is then cancelled cancels neither the write nor this future. After a
    retry whose first try had landed, the pointer's offset is ``-1`` (as the threaded
    writer's)."""

    __slots__ = ()  # _owner: the writer's event loop; _waiter: the asyncio.Future, if made

    def result(self) -> EventPointer:
        if not self._done:
            raise asyncio.InvalidStateError("the event is not acknowledged yet")
        if self._error is not None:
            raise self._error
        return EventPointer(self._segment, self._offset)

    def exception(self) -> BaseException | None:
        if not self._done:
            raise asyncio.InvalidStateError("the event is not acknowledged yet")
        return self._error

    def as_future(self) -> asyncio.Future[EventPointer]:
        """An :class:`asyncio.Future` resolved with this outcome (the same one each call);
        cancelling it cancels nothing but itself."""
        future: asyncio.Future[EventPointer] | None = self._waiter
        if future is None:
            loop: asyncio.AbstractEventLoop = self._owner
            future = self._waiter = loop.create_future()
            if self._done:
                self._resolve(future)
        return future

    def __await__(self) -> Generator[Any, None, EventPointer]:
        if not self._done:
            yield from asyncio.shield(self.as_future()).__await__()
        return self.result()

    def _complete(self, segment: int, offset: int, error: BaseException | None) -> None:
        self._record(segment, offset, error)
        self._done = True
        future = self._waiter
        if future is not None and not future.done():  # (done: cancelled by its holder)
            self._resolve(future)

    def _resolve(self, future: asyncio.Future[EventPointer]) -> None:
        if self._error is None:
            future.set_result(EventPointer(self._segment, self._offset))
        else:
            future.set_exception(self._error)
            future.exception()  # retrieved: flush() raises it; asyncio need not log it too


class AsyncEventStreamWriter(RoundSender[T, AsyncWriteFuture], Generic[T]):
    """Writes events of type ``T`` to one stream from asyncio code. Create with
    :meth:`~readergroup.aio.factory.AsyncEventStreamClientFactory.create_event_writer`.

    ``clock``/``sleep``: injected time for the retry logic (``sleep`` awaited for backoffs
    and ``linger``); by default the monotonic clock and :func:`asyncio.sleep`. A ``clock``
    given without ``sleep`` is slept with its own ``sleep`` (a test's fake clock, which only
    advances its time: a clock that really sleeps needs ``sleep`` too)."""

    ROUND_BATCHES = 4
    """Four full batches a round, not the sender thread's 16: each step of a round (batching,
    packing, settling its events) runs on the loop, so smaller rounds keep other tasks'
    waits short (docs/asyncio.md has the event loop's lag while writing)."""

    def __init__(
        self,
        connection: AsyncConnectionApi,
        metadata: AsyncStreamStates,
        scope: str,
        stream: str,
        serializer: Serializer[T],
        config: EventWriterConfig | None = None,
        *,
        max_event_size: int,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        rng: random.Random | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
        writer_id: str | None = None,
    ) -> None:
        super().__init__(
            scope,
            stream,
            serializer,
            config,
            clock=clock or _MONOTONIC,
            wall_ms=wall_clock_ms or wall_clock_ms_now,
            max_event_size=max_event_size,
            rng=rng,
            writer_id=writer_id,
        )
        self._connection = connection
        self._metadata = metadata
        self._sleep = sleep or (asyncio.sleep if clock is None else _sleeping_on(clock))
        self._accounting = nullcontext()
        self._loop = asyncio.get_running_loop()
        self._event_class = AsyncWriteFuture
        self._event_owner = self._loop
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        # events waiting for room, in line, each with the future that admits it
        self._waiting: deque[tuple[AsyncWriteFuture, asyncio.Future[None]]] = deque()
        self._closed = False
        self._sender = self._loop.create_task(self._run(), name=f"rg-writer-{scope}/{stream}")
        self._sender.add_done_callback(self._sender_ended)

    # -- public API -------------------------------------------------------------------------
    async def write_event(
        self, event: T, routing_key: str | None = None, *, headers: Headers | None = None
    ) -> EventPointer:
        """Write ``event`` and return where it landed, once it is in Redis (acknowledged as
        ``ClientConfig.acks`` asks). Raises as :meth:`send` does, and the event's own error
        (:class:`~readergroup.core.errors.WriteFailedError` after ``delivery_timeout``,
        :class:`~readergroup.core.errors.StreamSealedError`...) if it was not written.
        Cancelling the awaiting task does not cancel the write (see the module docstring)."""
        queued = await self.send(event, routing_key, headers=headers)
        if queued.done():
            return queued.result()
        # this call's own future (nobody else holds it): cancelling the task cancels only it,
        # never the write, with one hop less than a shield
        return await queued.as_future()

    async def send(
        self, event: T, routing_key: str | None = None, *, headers: Headers | None = None
    ) -> AsyncWriteFuture:
        """Queue ``event`` and return its :class:`AsyncWriteFuture` (awaitable: where it
        lands), without waiting for it to land (pipelining: ``await`` the futures later, or
        just :meth:`flush`). Named after aiokafka's ``send`` (``write_event`` is its
        ``send_and_wait``). Awaits only while
        ``max_in_flight_bytes`` are queued or in flight, up to ``max_block`` seconds.

        Raises at once (nothing queued) as the threaded ``write_event`` does: a serializer
        error or a value that is not bytes-like (:class:`SerializationError`), an event over
        ``max_event_size`` or headers over their bounds (:class:`EventTooLargeError`), a
        closed writer (:class:`WriterClosedError`), no room within ``max_block``
        (:class:`WriteFailedError`)."""
        if self._closed:
            raise WriterClosedError("the writer is closed")
        queued = self._new_event(event, routing_key, headers)
        if self._waiting or not self._fits(queued.size):
            await self._wait_for_room(queued)
        else:
            self._enqueue(queued)
            if len(self._queue) % self._config.max_batch_events == 0:
                # a batch's worth queued without a pause: let the sender send meanwhile (a
                # loop of sends that never waits would otherwise only queue, then send)
                await asyncio.sleep(0)
        return queued

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every event written so far is acknowledged or failed; raise the first
        failure since the previous flush. Returns by the last event's deadline at the latest,
        or raises ``TimeoutError`` after ``timeout`` seconds."""
        if self._outstanding:
            try:
                await asyncio.wait_for(self._idle.wait(), timeout)
            except TimeoutError:
                raise TimeoutError(f"{self._outstanding} events still unacknowledged") from None
        failure = self._take_failure()
        if failure is not None:
            raise failure

    async def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender task. Idempotent."""
        if self._closed:
            return
        try:
            await self.flush(timeout)
        finally:
            self._closed = True
            self._wakeup.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._sender), 10)
            except TimeoutError:
                log.warning("writer of %s/%s: its sender did not stop", self._scope, self._stream)

    async def __aenter__(self) -> AsyncEventStreamWriter[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- sender -----------------------------------------------------------------------------
    def _enqueue(self, queued: AsyncWriteFuture) -> None:
        self._outstanding += 1
        self._buffered += queued.size
        self._idle.clear()
        queue = self._queue
        queue.append(queued)
        if len(queue) == 1:  # the sender takes the queue whole: only its first event wakes it
            self._wakeup.set()

    def _fits(self, size: int) -> bool:
        return self._buffered + size <= self._max_in_flight or not self._buffered

    async def _wait_for_room(self, queued: AsyncWriteFuture) -> None:
        """Wait in line (first come, first queued: so concurrent tasks' events are queued in
        the order their calls began) until ``queued`` fits, up to ``max_block``. Cancelled,
        the event keeps its place in line and is queued in its turn."""
        admitted = self._loop.create_future()
        place = (queued, admitted)
        self._waiting.append(place)
        try:
            await asyncio.wait_for(asyncio.shield(admitted), self._config.max_block)
        except TimeoutError:
            if admitted.done():
                return
            self._waiting.remove(place)  # not written: it never was in the queue
            self._admit()
            raise self._no_room_error() from None

    def _admit(self) -> None:
        """Queue the events waiting for room, in line, while they fit."""
        waiting = self._waiting
        while waiting and self._fits(waiting[0][0].size):
            queued, admitted = waiting.popleft()
            self._enqueue(queued)
            if not admitted.done():
                admitted.set_result(None)

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            if self._config.linger:
                await self._sleep(self._config.linger)
            self._wakeup.clear()
            while self._queue or self._backlog:
                await self._send_round()
            if self._closed and not self._queue:
                return

    async def _send_round(self) -> None:
        """Send one drained round until every event in it is acknowledged or failed."""
        events = self._drain()
        driver = StepDriver(self.round_steps(events))
        # a large round's steps each take a while (batching, packing, settling thousands of
        # events): let the loop run between them
        pause = len(events) >= self._config.max_batch_events
        try:
            while (step := driver.next()) is not None:
                try:
                    driver.reply = await self._perform(step)
                except Exception as exc:
                    driver.error = exc
                if pause:
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            self._fail(events, WriterClosedError("the writer's sender task was cancelled"))
            raise
        except BaseException as exc:  # fail what is left of the round; the sender lives on
            self._fail(events, exc)

    async def _perform(self, step: Step) -> Any:
        """One step of a round (see :mod:`readergroup.client.write_rounds`), awaited."""
        if type(step) is SendBatches:
            return await self._connection.segments.append(step.batches)
        if type(step) is FetchState:
            if step.refresh:
                self._metadata.invalidate(self._scope, self._stream)
            return await self._metadata.get(self._scope, self._stream)
        assert type(step) is Pause
        await self._sleep(step.seconds)
        return None

    def _released(self) -> None:
        if self._waiting:
            self._admit()
        if not self._outstanding:
            self._idle.set()

    def _sender_ended(self, task: asyncio.Task[None]) -> None:
        """The sender task ended: by close (nothing to say), cancelled with the loop, or by a
        bug (logged; the writer is closed so that nobody waits on it)."""
        self._closed = True
        if task.cancelled():
            pending = self._backlog[self._backlog_next :] + self._queue
            self._queue, self._backlog, self._backlog_next = [], [], 0
            self._fail(pending, WriterClosedError("the writer's sender task was cancelled"))
            waiting, self._waiting = self._waiting, deque()
            for queued, admitted in waiting:
                queued._complete(-1, -1, WriterClosedError("the writer's sender was cancelled"))
                if not admitted.done():
                    admitted.set_result(None)
            return
        error = task.exception()
        if error is not None:
            log.warning(
                "writer of %s/%s: its sender task failed", self._scope, self._stream, exc_info=error
            )


class _Monotonic:
    """The monotonic clock (only its time: the asyncio writer awaits its sleeps)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        raise AssertionError("the asyncio writer never sleeps on its clock")


_MONOTONIC: Clock = _Monotonic()


def _sleeping_on(clock: Clock) -> Callable[[float], Awaitable[None]]:
    async def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        await asyncio.sleep(0)

    return sleep
