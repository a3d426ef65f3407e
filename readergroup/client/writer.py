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

import os
import random
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from readergroup.client.metadata_cache import StreamMetadataCache
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
    logger,
)
from readergroup.core.errors import WriterClosedError, WriterForkedError
from readergroup.core.headers import Headers
from readergroup.core.steps import StepDriver
from readergroup.storage.connection_api import Connection
from statesync.clock import Clock
from statesync.system_clock import SYSTEM_CLOCK

__all__ = ["EventPointer", "EventStreamWriter", "EventWriterConfig", "WriteFuture"]

T = TypeVar("T")


class WriteFuture(QueuedEvent):
    """The outcome of one ``write_event``: resolves to an :class:`EventPointer` once the event
    is in Redis, or to the error that stopped it. ``result``, ``exception``, ``done`` and
    ``add_done_callback`` behave as in :mod:`concurrent.futures`.

    It is also the queued event itself (one small object per event keeps ``write_event``
    cheap); its :class:`EventPointer` is built when asked for. After a retry whose first try
    had landed, the pointer's offset is ``-1`` (the script reports only that the batch is
    already in)."""

    __slots__ = ()  # _owner: the writer's completion Condition; _waiter: callbacks, if any

    _callback_lock = threading.Lock()

    def _wait(self, timeout: float | None) -> None:
        if self._done:
            return
        completed: threading.Condition = self._owner
        with completed:
            if not completed.wait_for(lambda: self._done, timeout):
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
                self._waiter = [*(self._waiter or []), callback]
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
        self._record(segment, offset, error)
        if self._waiter is None:
            self._done = True
            return
        with self._callback_lock:
            self._done = True
            callbacks, self._waiter = self._waiter, None
        for callback in callbacks or ():
            self._call(callback)


class EventStreamWriter(RoundSender[T, WriteFuture], Generic[T]):
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
        state = metadata.get(scope, stream)
        super().__init__(
            scope,
            stream,
            serializer,
            config,
            clock=clock or SYSTEM_CLOCK,
            wall_ms=wall_clock_ms or wall_clock_ms_now,
            max_event_size=state.config.max_event_size,
            rng=rng,
            writer_id=writer_id,
        )
        self._connection = connection
        self._metadata = metadata
        # (the system clock's own function: one call less per event than through the clock)
        self._monotonic = time.monotonic if clock is None else self._clock.monotonic
        self._wakeup = threading.Event()
        # _accounting guards _outstanding, _buffered, _queue and _failures; _idle/_room wait
        self._accounting = threading.Lock()
        self._idle = threading.Condition(self._accounting)
        self._room = threading.Condition(self._accounting)
        self._completed = threading.Condition()
        self._event_class = WriteFuture
        self._event_owner = self._completed
        self._closed = False
        self._pid = os.getpid()  # a copy in a forked child is unusable (_after_fork_in_child)
        _LIVE_WRITERS.add(self)
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
        future = self._new_event(event, routing_key, headers)
        size = future.size
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
            failure = self._take_failure()
        if failure is not None:
            raise failure

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
                raise self._no_room_error()
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

    def _send_round(self) -> None:
        """Send one drained round until every event in it is acknowledged or failed."""
        events = self._drain()
        driver = StepDriver(self.round_steps(events))
        try:
            while (step := driver.next()) is not None:
                try:
                    driver.reply = self._perform(step)
                except Exception as exc:
                    driver.error = exc
        except BaseException as exc:  # fail what is left of the round; the sender lives on
            self._fail(events, exc)
        finally:
            self._wake_waiters()

    def _perform(self, step: Step) -> Any:
        """One step of a round (see :mod:`readergroup.client.write_rounds`), blocking."""
        if type(step) is SendBatches:
            return self._connection.segments.append(step.batches)
        if type(step) is FetchState:
            if step.refresh:
                self._metadata.invalidate(self._scope, self._stream)
            return self._metadata.get(self._scope, self._stream)
        assert type(step) is Pause
        self._clock.sleep(step.seconds)
        return None

    def _released(self) -> None:
        if not self._outstanding:
            self._idle.notify_all()
        self._room.notify_all()

    def _wake_waiters(self) -> None:
        with self._completed:
            self._completed.notify_all()


_LIVE_WRITERS: weakref.WeakSet[EventStreamWriter[Any]] = weakref.WeakSet()
"""Every writer of this process, to mark its copies in a forked child unusable."""


def _after_fork_in_child() -> None:
    """A forked child's copies of its parent's writers have no sender thread: mark them
    closed, so that ``write_event`` raises there (:class:`WriterForkedError`, told by the
    pid) at no cost per event in the parent."""
    for writer in list(_LIVE_WRITERS):
        writer._closed = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def wall_clock_ms_now() -> int:
    """The wall clock in ms since the epoch (what writers stamp on each event)."""
    return int(time.time() * 1000)
