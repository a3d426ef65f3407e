"""Run a handler over a reader's events: segments in parallel, each segment in order.

:func:`run` is the common case done right (Nuclio's workers): the calling thread reads batches;
every owned segment has its own queue (a *lane*), drained by at most one worker at a time, so a
segment's events are handled strictly in order, by a pool of ``max_workers`` threads. Events go
from the reading thread to a worker a run at a time (a batch's events of one segment), never one
by one. A position is committed only after the handler returned for every event before it.

Stopping: SIGINT or SIGTERM (or ``stop.set()``) lets each worker finish the event it is
handling (at most ``max_workers`` events after the stop, however deep the queues), commits
exactly what was handled, and returns. Events read but not handled yet are given back: nothing
past the last handled event is committed, so the next owner of each segment (this reader's
successor once it is closed) gets them again. That needs ``commit_mode="manual"``: in the
automatic mode the reader itself commits what it handed out, so there a stop still handles
every queued event first.

A segment the group takes away mid-run has its lane dropped; the new owner resumes at the last
committed position, so only uncommitted events can be handled twice (at-least-once).

Outages: while Redis cannot be reached, reads return nothing and commits are put off (logged).
If the outage outlasts the session the reader is fenced: every lane is dropped, and the run
rejoins the group by itself as a new generation once Redis is back, then goes on.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from readergroup.client import stop_signals
from readergroup.client.event_read import EventRead, EventSource, by_segment
from readergroup.core.errors import (
    ReaderGroupError,
    ReaderNotInGroupError,
    ReaderReplacedError,
    SegmentNotOwnedError,
)
from readergroup.core.group_config import MANUAL
from readergroup.core.group_state import SegKey
from statesync import StateSyncError

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass
class RunStats:
    """What a run did: events handled, handler failures, commits made, and events read but
    left unhandled by a stop (``given_back``: uncommitted, so delivered again to the next
    owner)."""

    handled: int = 0
    failed: int = 0
    commits: int = 0
    given_back: int = 0


class _Lane:
    """One segment's queue of runs (lists of its events, in order). ``generation`` changes
    when the segment is taken away."""

    __slots__ = ("generation", "running", "runs")

    def __init__(self) -> None:
        self.runs: deque[list[Any]] = deque()
        self.running = False
        self.generation = 0


class _Runner(Generic[T]):
    def __init__(
        self,
        reader: EventSource[T],
        handler: Callable[[EventRead[T]], Any],
        on_error: Callable[[EventRead[T], BaseException], Any] | None,
        max_queued: int,
        stop: threading.Event | None = None,
    ) -> None:
        self.reader = reader
        self.stop = stop or threading.Event()
        """Set: workers end with their event in progress and queued runs are given back (only
        for a reader that commits nothing it is not told to: see :func:`gives_back`)."""
        self.handler = handler
        self.on_error = on_error
        self.max_queued = max_queued
        self.stats = RunStats()
        self.lanes: dict[SegKey, _Lane] = {}
        self.processed: dict[SegKey, int] = {}
        self.lock = threading.Condition()
        self.failure: list[BaseException] = []
        self.queued = 0

    # rebalance listener (called on the reading thread, inside its read call): drop the lanes
    # of segments this reader gives up, committing first what was handled of them
    def on_segments_acquired(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        return None

    def on_segments_released(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        self._drop(segments)
        with self.lock:
            handled = {k: self.processed[k] for k in segments if k in self.processed}
        self.commit(handled)  # they are still this reader's: the commit lands
        with self.lock:
            for key in segments:
                self.processed.pop(key, None)

    def on_segments_lost(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        self._drop(segments)
        with self.lock:
            for key in segments:
                self.processed.pop(key, None)

    def _drop(self, segments: Sequence[SegKey]) -> None:
        """Drop the queued events of ``segments`` (a run under way finishes, uncommitted)."""
        with self.lock:
            for key in segments:
                lane = self.lanes.get(key)
                if lane is not None:
                    self.queued -= sum(len(run) for run in lane.runs)
                    lane.runs.clear()
                    lane.generation += 1
            self.lock.notify_all()

    def dispatch(self, pool: ThreadPoolExecutor, events: list[EventRead[T]]) -> None:
        """Hand ``events`` to their segments' lanes, one run of a segment's events at a time
        (no per-event hand-over between threads)."""
        runs = by_segment(events)
        with self.lock:
            for key, run in runs:
                lane = self.lanes.setdefault(key, _Lane())
                lane.runs.append(run)
                self.queued += len(run)
                if not lane.running:
                    lane.running = True
                    pool.submit(self.drain, key, lane, lane.generation)

    def drain(self, key: SegKey, lane: _Lane, generation: int) -> None:
        while True:
            with self.lock:
                if self.stop.is_set() and lane.generation == generation:
                    self.give_back(lane)
                if not lane.runs or lane.generation != generation or self.failure:
                    lane.running = False
                    self.lock.notify_all()
                    return
                run = lane.runs.popleft()
            handled, failed, last = self.handle_run(run, lane, generation)
            with self.lock:
                self.queued -= len(run)
                if lane.generation == generation:  # (a segment taken away commits nothing more)
                    if last is not None:
                        self.processed[key] = last
                    if self.stop.is_set() and not failed:
                        self.stats.given_back += len(run) - handled
                self.stats.handled += handled
                self.stats.failed += failed
                self.lock.notify_all()

    def give_back(self, lane: _Lane) -> None:
        """Stopping: drop ``lane``'s runs not begun (caller holds the lock). They are not
        committed, so the segment's next owner reads them again."""
        dropped = sum(len(run) for run in lane.runs)
        lane.runs.clear()
        self.queued -= dropped
        self.stats.given_back += dropped

    def handle_run(
        self, run: list[EventRead[T]], lane: _Lane, generation: int
    ) -> tuple[int, int, int | None]:
        """Handle a run of one segment's events in order, until the run ends, the segment is
        taken away or the run must stop (a failure); returns (handled, failed, the position
        after the last event handled)."""
        handler, failure, stop = self.handler, self.failure, self.stop
        handled = failed = 0
        last: EventRead[T] | None = None
        for event in run:
            if lane.generation != generation or failure or stop.is_set():
                break
            try:
                handler(event)
            except BaseException as exc:
                if not self.handled_error(event, exc):
                    failed += 1
                    break
            handled += 1
            last = event
        offset = None if last is None else last.offset
        return handled, failed, None if offset is None else offset + 1

    def handled_error(self, event: EventRead[T], exc: BaseException) -> bool:
        """Whether ``on_error`` took the handler's failure (the event then counts as handled);
        otherwise the failure stops the run."""
        if self.on_error is None:
            self.failure.append(exc)
            return False
        try:
            self.on_error(event, exc)
            return True
        except BaseException as inner:
            self.failure.append(inner)
            return False

    def full(self) -> bool:
        with self.lock:
            return self.queued >= self.max_queued and not self.failure

    def wait_for_room(self, pool: ThreadPoolExecutor, stop: threading.Event) -> None:
        """While the lanes are full, the owned segments are paused and read calls go on (they
        hand out nothing of them, but run the group's work: a rebalance, a checkpoint); events
        of segments acquired meanwhile are queued. Then the segments are resumed."""
        if not self.full():
            return
        paused = [k for k in self.reader.owned_segments() if k not in self.reader.paused()]
        self.reader.pause(paused)
        try:
            while self.full() and not stop.is_set():
                try:
                    self.dispatch(pool, self.reader.read_batch(1000, timeout=0.1))
                except ReaderNotInGroupError:
                    return  # the main loop's read raises it again and rejoins
        finally:
            self.reader.resume(paused)

    def wait_idle(self) -> None:
        with self.lock:
            while any(lane.running for lane in self.lanes.values()):
                self.lock.wait(0.1)

    def commit(self, handled: dict[SegKey, int] | None = None) -> None:
        """Commit what was handled (of every segment, or ``handled``)."""
        with self.lock:
            chosen = dict(self.processed) if handled is None else handled
        owned = self.reader.owned_segments()
        chosen = {k: p for k, p in chosen.items() if k in owned}
        if not chosen:
            return
        try:
            self.reader.commit(chosen)
            self.stats.commits += 1
        except (SegmentNotOwnedError, ReaderNotInGroupError) as exc:
            # moved on a rebalance or fenced; the new owner resumes from the last commit
            logger.warning("commit dropped (segments moved or reader fenced): %s", exc)
        except (ReaderGroupError, StateSyncError) as exc:
            if not exc.retriable:
                raise
            logger.warning("commit put off (Redis unreachable), retried next round: %s", exc)


def gives_back(reader: object) -> bool:
    """Whether events ``reader`` handed out but the run did not handle can be left to the next
    owner: only if the reader commits just what it is told (``commit_mode="manual"``). In the
    automatic mode the reader commits what it handed out (on its next read, and when it
    closes), so a stopping run handles everything queued first, as it always did."""
    return bool(getattr(reader, "commit_mode", None) == MANUAL)


def run(
    reader: EventSource[T],
    handler: Callable[[EventRead[T]], Any],
    *,
    max_workers: int = 4,
    stop: threading.Event | None = None,
    max_queued: int = 10_000,
    commit_every: int = 1,
    handle_signals: bool = True,
    on_error: Callable[[EventRead[T], BaseException], Any] | None = None,
) -> RunStats:
    """Handle events until ``stop`` is set or a signal arrives; return the counts.

    ``handler`` runs in worker threads. If it raises, ``on_error`` decides (its normal return
    counts the event as handled); without ``on_error`` the run stops, commits what was handled
    and re-raises. Commits happen every ``commit_every`` read rounds and at the end.

    A stop (``stop.set()``, SIGINT, SIGTERM) with ``commit_mode="manual"`` returns once each
    worker finished the event it was handling: events still queued are not handled
    (``RunStats.given_back`` counts them) nor committed; close the reader then, and the
    segments' next owner gets them. In the automatic mode the reader commits what it handed
    out, so a stop handles every queued event first (up to ``max_queued``).
    """
    if max_workers < 1 or commit_every < 1:
        raise ValueError("max_workers and commit_every must be >= 1")
    stop = stop or threading.Event()
    runner = _Runner(reader, handler, on_error, max_queued, stop if gives_back(reader) else None)
    reader.add_rebalance_listener(runner)
    previous = stop_signals.install(stop) if handle_signals else {}
    try:
        with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rg-worker") as pool:
            rounds = 0
            while not stop.is_set() and not runner.failure:
                runner.wait_for_room(pool, stop)
                try:
                    events = reader.read_batch(1000)
                except ReaderReplacedError:
                    raise  # a newer incarnation of this id runs: this run must stop
                except ReaderNotInGroupError:
                    reader.rejoin(stop)  # fenced (lanes dropped): back as a new generation
                    continue
                runner.dispatch(pool, events)
                rounds += 1
                if rounds % commit_every == 0:
                    runner.commit()
            runner.wait_idle()  # (after a stop: each worker ends with its event in progress)
        runner.commit()
        if stop.is_set() and runner.stats.given_back:
            logger.info(
                "run stopped: %d events handled; %d read but not handled are left uncommitted "
                "for the segments' next owner",
                runner.stats.handled,
                runner.stats.given_back,
            )
    finally:
        stop_signals.restore(previous)
    if runner.failure:
        raise runner.failure[0]
    return runner.stats
