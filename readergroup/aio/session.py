"""The group side of an asyncio reader: :class:`AsyncGroupSession`, the very decisions of the
threaded :class:`~readergroup.client.group_session.GroupSession`
(:class:`~readergroup.client.group_session.SessionSteps`: membership, rebalance rounds,
hold-releases, reconcile, commit limits, rewinds, checkpoints, completion of sealed segments,
removal and fencing, leave, rejoin, the read call's step) driven by the tasks of one event loop:
the reading task (the application's read calls), a **maintenance task** and a **heartbeat
task** (never threads).

Exclusion: the steps change the segment table only in their own code between two awaits, so
no other task runs meanwhile; the one thing that spans awaits is the fetcher's work (its plans
may await a segment's log in the middle of a decision), so the reader's *hand-out lock* (an
:class:`asyncio.Lock`) is held by every fetcher call (let go while it waits on ``XREAD``:
:attr:`~readergroup.client.aio_fetcher.AsyncFetcher.unlocked`, taken back even when cancelled)
and by the steps' own code (:func:`~readergroup.storage.aio_calls.drive_async`'s ``local``).
Group round trips (maintenance rounds, ``commit()``, ``close()``, ``rejoin()``) are serialized by a
task-re-entrant lock (a listener called by ``close()`` may commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, TypeVar

from readergroup.admin.aio_group_member import AsyncGroupMember
from readergroup.aio.looks import alarms_of, looks_of
from readergroup.client.aio_fetcher import AsyncFetcher
from readergroup.client.event_read import EventRead
from readergroup.client.fetch_core import WATCHED, FetchOutcome, Outage
from readergroup.client.group_session import SessionSteps
from readergroup.client.maintenance import maintenance_steps
from readergroup.core.calls import Steps
from readergroup.core.group_config import AUTO, ReaderGroupConfig
from readergroup.storage.aio_calls import drive_async
from readergroup.storage.aio_reader_connection import AsyncReaderConnection
from readergroup.storage.aio_reads import AsyncPendingRead
from readergroup.storage.multi_read import MAX_PARKED_BLOCK_SECONDS
from statesync.aio_synchronizer import clock_sleep

T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger(__name__)

BEAT_GRID = 0.25
"""Seconds: a heartbeat task's pause of at least ten of these ends on the event loop's grid of
them (its clock's next multiple: at most one grid step later than asked, never earlier, so no
more heartbeats than before), so the idle readers of one loop renew at a few shared moments and
their renewals go out together (one pipeline per turn of the loop, see
:class:`~readergroup.storage.aio_script_batches.ScriptBatcher`)."""


class LoopGate:
    """The threaded hand-out gate's face for steps run on one event loop: its code between two
    awaits cannot interleave with another task's, so ``lock`` and ``released`` are no-ops;
    ``closed`` shuts the fast path's window."""

    __slots__ = ("_shut", "busy", "lock")

    def __init__(self, shut: Callable[[], None]) -> None:
        self._shut = shut
        self.busy = False
        self.lock = contextlib.nullcontext()

    @contextlib.contextmanager
    def closed(self) -> Iterator[None]:
        self._shut()
        yield

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        yield


class TaskRLock:
    """An :class:`asyncio.Lock` the task holding it may take again (re-entrant per task)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None
        self._depth = 0

    async def acquire(self) -> bool:
        task = asyncio.current_task()
        if self._owner is not task or task is None:
            await self._lock.acquire()
            self._owner = task
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._lock.release()


class AsyncGroupSession(SessionSteps[T]):
    """One asyncio reader's life in its group (see the module doc). Create it in the event
    loop that will run it (its heartbeat task starts at once)."""

    gate: LoopGate
    wake: asyncio.Event
    stop: StopSignal

    def __init__(
        self,
        connection: AsyncReaderConnection,
        member: AsyncGroupMember,
        group_config: ReaderGroupConfig,
        fetcher: AsyncFetcher[T],
        outage: Outage,
        **injected: Any,
    ) -> None:
        """``injected``: ``clock`` and ``rng`` (see :class:`SessionSteps`)."""
        wake, stop = asyncio.Event(), StopSignal()
        gate = LoopGate(self._shut)
        args = (connection, member, group_config, fetcher, outage)
        super().__init__(*args, gate=gate, wake=wake, stop=stop, **injected)
        self._reader_connection = connection
        self._aio_fetcher = fetcher
        self.segments = connection.segments
        self.hand_out = asyncio.Lock()
        """Held by the fetcher's calls (let go while they wait) and the steps' own code."""
        self._group_lock = TaskRLock()
        self._sleep = clock_sleep(self._clock)
        self._maintenance: asyncio.Task[Any] | None = None
        self._heartbeats: asyncio.Task[Any] | None = None
        self._watching = False
        """The reading task's fetch waits on the group's wake streams now."""
        self._idle_interrupt: asyncio.Future[object] | None = None
        """What ends an idle read call's wait early (see :meth:`interrupt_idle_wait`): one
        future for every such wait until it is used."""
        self.idle_waiting = False
        """An idle read call waits on the parked read now."""
        self._round_begun = False
        """A maintenance round began and is not over (see :meth:`_begin_round`)."""
        fetcher.unlocked = self._unlocked
        self.start_background()

    @property
    def group_lock(self) -> TaskRLock:
        return self._group_lock

    def run(self, steps: Steps[R]) -> Any:
        """Drive ``steps`` (a coroutine to await)."""
        return drive_async(steps, self, local=self._local)

    def _local(self) -> asyncio.Lock:
        """What the steps' own code runs under: the hand-out lock (held as it is, an async
        context manager of its own)."""
        return self.hand_out

    @contextlib.asynccontextmanager
    async def _unlocked(self) -> AsyncIterator[None]:
        """Let go of the hand-out lock while the fetcher waits; take it back even when the
        wait is cancelled (the fetcher's plan goes on under it to its end)."""
        self.hand_out.release()
        try:
            yield
        finally:
            await _acquire_uncancelled(self.hand_out)

    # -- the steps' I/O, awaited -------------------------------------------------------------
    async def fetch(self, block: float, logs: Mapping[str, str], hold: float) -> FetchOutcome:
        fetcher = self._aio_fetcher
        async with self.hand_out:
            self._watching = not fetcher.reading_ahead and any(g in logs for g in self._group_logs)
            try:
                switches = self._reader_connection.primary_switches()
                return await fetcher.fetch(block, logs, hold=hold, switches=switches)
            finally:
                self._watching = False

    async def serve(
        self, max_events: int, timeout: float, now: float, *, iterating: bool = False
    ) -> list[EventRead[T]]:
        """A read call's slow path: :meth:`serve_steps`, but an *idle* call (one a fetch would
        spend waiting on the parked ``XREAD``, see :meth:`_idle_parked`) waits on that read
        directly, then ends as :meth:`serve_steps` would after its fetch: at once with nothing
        when nothing else happened meanwhile (no step machinery, no take, no fetch plan: an
        idle reader's read call costs a few checks and one wait), else through its steps.

        The wait lasts until the parked read's reply is due or the next idle look at the
        segments' logs (:meth:`~readergroup.client.fetch_core.FetchCore.parked_left`), for a
        call with a timeout no longer than that; ``iterating`` (``async for``, whose timeouts
        are skipped): that long whatever the timeout, so an idle iteration makes one call per
        parked read, not one per ``longest_block()``. It ends early when a maintenance round
        begins (:meth:`wait_wake` returning: the round may bring segments to read, listeners
        to call, a removal; the call goes on through its steps, which poll while the round is
        under way) or ``stop_iteration()`` is called (the call ends with nothing)."""
        parked = self._idle_parked(timeout, now)
        if parked is None:
            return await drive_async(self.serve_steps(max_events, timeout, now), self)
        self._watching = any(log in parked.positions for log in self._group_logs)
        interrupt = self._idle_interrupt
        if interrupt is None or interrupt.done():  # (one per session until it is used)
            interrupt = self._idle_interrupt = asyncio.get_running_loop().create_future()
        self.idle_waiting = True
        try:
            block = self._aio_fetcher.parked_left()
            block = min(self._time_left(timeout, now), block) if not iterating else block
            block = min(block, self._idle_wait_bound())
            arrived = await parked.ready(block, interrupt)
        finally:
            self._watching = False
            self.idle_waiting = False
        if arrived:  # a fetch applies the reply (at once: the same parked read)
            return await drive_async(self.serve_steps(max_events, timeout, now), self)
        self.absorb(WATCHED)
        self.check_lease()
        stopped = interrupt.done() and interrupt.result() is _STOP
        if stopped or (self._time_left(timeout, now) <= 0 and self._quiet()):
            return []
        return await drive_async(self.serve_steps(max_events, timeout, now, fetched=True), self)

    def interrupt_idle_wait(self) -> None:
        """End the idle read call waiting now (see :meth:`serve`), if any, with nothing, as if
        its time were up: what ``stop_iteration()`` calls so that an idle ``async for`` (whose
        calls each last until the parked read's reply, up to
        :data:`~readergroup.storage.multi_read.MAX_PARKED_BLOCK_SECONDS`) ends at once. The parked
        ``XREAD`` stays parked for the next call."""
        self._interrupt_idle_wait(_STOP)

    def _attend(self) -> None:
        """Have the idle read call waiting now (if any) look at the session again, through
        its steps (the rest of its time as any call's): a maintenance round begins (its
        outcome may be segments to read, listeners to call, a removal, a fencing)."""
        self._interrupt_idle_wait(_ATTEND)

    def _interrupt_idle_wait(self, why: object) -> None:
        interrupt = self._idle_interrupt
        if self.idle_waiting and interrupt is not None and not interrupt.done():
            interrupt.set_result(why)

    def _idle_wait_bound(self) -> float:
        """The longest an idle call may wait whatever its timeout: until the lease would end
        with no heartbeat renewed meanwhile (the next call's checks then fence the reader:
        a failing heartbeat posts no round, and a server that stopped answering leaves the
        parked read unanswered), and half ``max_poll_interval`` (the call is the reader's
        poll)."""
        lease_left = self.lease_ends() - self._clock.monotonic()
        return max(0.0, min(lease_left, self._group.max_poll_interval / 2))

    def _idle_parked(self, timeout: float, now: float) -> AsyncPendingRead | None:
        """The parked ``XREAD`` this read call's fetch would only wait on, after doing what
        :meth:`serve_steps` does first (the call's poll, the events consumed), if the call is
        idle: nothing awaits the reading task (no listener to tell, no checkpoint, no removal,
        no error, nothing buffered or read ahead, not closed, lease held), no maintenance
        round posted or under way, no other task in the middle of the fetcher's work (the
        hand-out lock is free), time left to wait, and the fetcher's own conditions
        (:meth:`~readergroup.client.fetch_core.FetchCore.parked_wait`). ``None``: the call
        takes its steps."""
        if self.closed or self.hand_out.locked() or self._round_begun or not self._quiet():
            return None
        if self.fenced is not None or self._clock.monotonic() > self.lease_ends():
            return None  # (the steps fence and raise)
        self.last_poll = now
        self._aio_fetcher.consume_returned()
        self.consumed_recorded()
        if self.wake.is_set() or self.maintenance_posted():  # (the machine was found quiet)
            return None
        if self._time_left(timeout, now) <= 0:
            return None  # (at least one fetch, even past the timeout)
        switches = self._reader_connection.primary_switches()
        parked = self._aio_fetcher.parked_wait(self.wake_logs(), switches)
        return parked if isinstance(parked, AsyncPendingRead) else None

    def _time_left(self, timeout: float, now: float) -> float:
        """Seconds left of a read call that began at ``now`` with ``timeout``."""
        return now + max(0.0, timeout) - self._clock.monotonic()

    def parked_hold(self, hold: float) -> float:
        """An idle fetch's parked ``XREAD`` blocks on the server up to
        :data:`~readergroup.storage.multi_read.MAX_PARKED_BLOCK_SECONDS`, past the longest wait of a
        call (:meth:`longest_block`, ``heartbeat_interval``): a read call's wait is as before
        (an ``async for`` call's lasts until this read's reply, see :meth:`serve`); the
        ``XREAD`` outlives it, parked for the next call (one ``XREAD`` per 10 s, not per
        ``heartbeat_interval``). Shorter holds (a round under way, an owned segment's end known)
        stay as they are."""
        config = self._group
        if hold >= max(config.group_refresh_time, config.heartbeat_interval):
            return max(hold, MAX_PARKED_BLOCK_SECONDS)
        return hold

    def _quiet(self) -> bool:
        """Whether a read call's steps would find nothing to do before a fetch: no listener
        to tell, nothing for the reader's machine (no removal, checkpoint, segment changes),
        no error, no event buffered or read ahead (nor an error held in a buffer), not at the
        end of the data, the group there."""
        fetcher = self._aio_fetcher
        return (
            self.telling is None
            and not self.machine.needs_reader
            and not fetcher.errors
            and not fetcher.reading_ahead
            and not self.end_of_data
            and not self.gone
            and not any(o.buffer or o.pending is not None for o in fetcher.owned.values())
        )

    def _unwatched(self, now: float) -> bool:
        """As the threaded session's, but a fetch of the reading task waiting on the group's
        wake streams watches it now (an idle reader whose read timeout is
        ``group_refresh_time`` is not taken for an unwatched one just before its fetch
        ends: no group log read of its own)."""
        return not self._watching and super()._unwatched(now)

    async def take_refilled(self, max_events: int) -> list[EventRead[T]]:
        async with self.hand_out:
            return await self._aio_fetcher.take_refilled(max_events)

    async def backoff(self, seconds: float) -> None:
        await self._sleep(seconds)

    async def wait_wake(self, timeout: float) -> bool:
        """Wait until work is posted (``wake``) or, after ``timeout`` s, a round due by the
        clock alone would act. The clock's rounds are looked at by timer callbacks, not by
        waking this task: an idle reader's periodic round (``group_refresh_time``) that would
        find nothing to do (see :meth:`round_would_act`) costs a look, not a round. The first
        look is a timer of this wait's own (after ``timeout``); the next are the loop's shared
        ones (:class:`~readergroup.aio.looks.PeriodicLooks`: one timer per
        ``group_refresh_time`` for every idle reader of the loop), until one would act."""
        self._round_begun = False  # (the last round, if any, is over)
        wake = self.wake
        if wake.is_set():
            self._begin_round()
            return True
        loop = asyncio.get_running_loop()
        looks, period = looks_of(loop), self._group.group_refresh_time

        def look() -> bool:
            if not wake.is_set() and self.round_would_act():
                wake.set()
            return wake.is_set()

        def first() -> None:
            if not look():
                looks.add(period, look)

        timer = loop.call_later(max(0.0, timeout), first)
        try:
            await wake.wait()
        finally:
            timer.cancel()
            looks.discard(period, look)
        self._begin_round()
        return True

    def _begin_round(self) -> None:
        """A maintenance round begins: no read call waits idle until it is over (the next
        :meth:`wait_wake`; a retried round counts as the same), and the one waiting now, if
        any, goes on through its steps (:meth:`_attend`). The round may wait for a lock
        before it shows as under way: a call that began idle then would wait past its
        outcome."""
        self._round_begun = True
        self._attend()

    def consumed_recorded(self) -> None:
        """As the threaded session's, but an auto commit due posts a round only when there
        are positions to commit (as :meth:`round_would_act` judges: a round with none would
        only move its clock on; an idle reader's read calls then post no round every
        ``auto_commit_interval``)."""
        if self._auto_commit_due(self._clock.monotonic()):
            self.wake.set()

    def _auto_commit_due(self, now: float) -> bool:
        """Whether an auto commit is due with a position to commit (a segment consumed past
        its committed position)."""
        config = self._group
        return (
            config.commit_mode == AUTO
            and now - self._last_commit >= config.auto_commit_interval
            and any(o.consumed > o.committed for o in self._aio_fetcher.owned.values())
        )

    def round_would_act(self) -> bool:
        """Whether a maintenance round now would do anything: work posted, a rewind to send, an
        auto commit due with positions to commit, or a refresh due that would read the group
        log (the heartbeat task fetched entries not acted on, or no fetch of the reading task
        watched the group lately) or may complete a segment (one read at a known end, or
        whose stream's metadata says sealed). Otherwise a round would only move its clocks
        on, and is not made: the next look finds the same due times."""
        if self.maintenance_due_in() > 0:
            return False
        if self.group_dirty or self._streams_dirty or self.machine.ack_due is not None:
            return True
        if self._aio_fetcher.rewound:
            return True
        config, now = self._group, self._clock.monotonic()
        if self._auto_commit_due(now):
            return True
        if now - self._last_refresh < config.group_refresh_time:
            return False
        return self._behind() or self._unwatched(now) or self._may_complete()

    def _may_complete(self) -> bool:
        """Whether an owned segment may be complete: bounded, or sealed (or gone) in its
        stream's metadata as last read."""
        owned = self._aio_fetcher.owned.values()
        for scoped, sync in self._streams.items():
            segments = sync.state.segments
            for segment in owned:
                if segment.key[0] != scoped:
                    continue
                record = segments.get(segment.segment)
                if segment.bounded or record is None or not record.active:
                    return True
        return False

    async def stopped_within(self, timeout: float) -> bool:
        """Whether ``stop`` was set within ``timeout`` s (the heartbeat task's pauses end on
        the :data:`BEAT_GRID`)."""
        stop = self.stop
        if timeout < 10 * BEAT_GRID or asyncio.current_task() is not self._heartbeats:
            return await _wait(stop, timeout)
        if stop.is_set():
            return True
        loop = asyncio.get_running_loop()
        alarm: asyncio.Future[None] = loop.create_future()
        alarms_of(loop).add(math.ceil((loop.time() + timeout) / BEAT_GRID) * BEAT_GRID, alarm)
        stop.also_ends(alarm)
        try:
            await alarm
        finally:
            stop.forget(alarm)
        return stop.is_set()

    async def stop_background(self, timeout: float) -> bool:
        """Stop the heartbeat and maintenance tasks (``stop`` is set): cancelled, then awaited
        (never the calling task itself); whether they are gone."""
        self.wake.set()
        current = asyncio.current_task()
        tasks = [t for t in (self._heartbeats, self._maintenance) if t is not None]
        tasks = [t for t in tasks if t is not current and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        return all(t.done() for t in tasks)

    def start_background(self) -> None:
        """Start the heartbeat task (the maintenance task starts with the first read call)."""
        self._maintenance = None
        self._heartbeats = asyncio.get_running_loop().create_task(
            self._background(self.heartbeat_loop_steps(), "heartbeat"),
            name=f"rg-heartbeat-{self.reader_id}",
        )

    def start_maintenance(self) -> None:
        """Start the maintenance task, once (the first read call)."""
        if self._maintenance is None and not self.closed and self.fenced is None:
            steps = maintenance_steps(self, self.wake, self.stop, self._rng)
            self._maintenance = asyncio.get_running_loop().create_task(
                self._background(steps, "maintenance"), name=f"rg-maintenance-{self.reader_id}"
            )

    async def _background(self, steps: Steps[None], what: str) -> None:
        try:
            await self.run(steps)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the steps handle every expected failure
            logger.warning("reader %r: the %s task ended", self.reader_id, what, exc_info=exc)

    def background_alive(self) -> bool:
        task = self._maintenance
        return task is not None and not task.done()


_STOP = object()
"""Why an idle read call's wait ended early: ``stop_iteration()`` (the call ends with nothing)."""
_ATTEND = object()
"""Why an idle read call's wait ended early: a maintenance round began (the call goes on
through its steps)."""


class StopSignal(asyncio.Event):
    """A session's ``stop``: an ``asyncio.Event`` whose :meth:`set` also resolves the futures
    registered with :meth:`also_ends` (a heartbeat pause waiting on a shared alarm, see
    :meth:`AsyncGroupSession.stopped_within`, ends at once, as a wait on the event would)."""

    def __init__(self) -> None:
        super().__init__()
        self._also: set[asyncio.Future[None]] = set()

    def also_ends(self, future: asyncio.Future[None]) -> None:
        self._also.add(future)

    def forget(self, future: asyncio.Future[None]) -> None:
        self._also.discard(future)

    def set(self) -> None:
        super().set()
        for future in list(self._also):
            if not future.done():
                future.set_result(None)


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` was set within ``timeout`` seconds."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()
    return event.is_set()


async def _acquire_uncancelled(lock: asyncio.Lock) -> None:
    """Take ``lock``; a cancellation meanwhile is raised once it is held."""
    cancelled: BaseException | None = None
    while True:
        try:
            await lock.acquire()
            break
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled
