"""The data side of an asyncio reader: :class:`AsyncFetcher`, which runs the plans of
:class:`~readergroup.client.fetch_core.FetchCore` (the very decisions of the threaded
:class:`~readergroup.client.fetcher.Fetcher`) with ``redis.asyncio``
(:class:`~readergroup.storage.aio_reads.AsyncSegmentReads`). Reads ahead and parked ``XREAD
BLOCK``\\ s run as tasks of the event loop; nothing blocks the loop and no thread is used.

Cancellation: a task awaiting :meth:`AsyncFetcher.fetch` (or anything else here) may be
cancelled at any await; nothing is lost. Events leave their buffers only when handed out
(:meth:`~readergroup.client.fetch_core.FetchCore.take_one` and ``take`` never await); a reply
is applied without awaiting, except for the rare checks of a segment's log (epochs, truncation,
losses), each of which leaves the core consistent when abandoned; a read the cancelled task was
waiting for runs on in its own task (the next fetch over the same positions takes its reply),
and a plain read cancelled mid-reply closes its connection (``redis.asyncio``), so the pool
holds no half-read reply. What was not applied is read again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, TypeVar, cast

from readergroup.client import fetch_core as core
from readergroup.client.event_read import EventRead
from readergroup.client.fetch_core import FetchCore, FetchOutcome, Outage, OwnedSegment, Plan
from readergroup.client.serializers import Serializer
from readergroup.core.group_config import ReaderConfig
from readergroup.core.group_state import SegKey
from readergroup.storage.aio_reader_connection import AsyncReads
from readergroup.storage.aio_reads import AsyncPendingRead
from readergroup.storage.segment_records import stored_events
from statesync.clock import Clock

T = TypeVar("T")
R = TypeVar("R")

TURN = 0.001
"""Most seconds a consumer on the fast path runs on without yielding to the event loop (see
:meth:`AsyncFetcher.turn_due`): other tasks wait about this long at most behind a reader with
events buffered."""

TURN_EVENTS = 16
"""Events handed out between looks at the clock for :data:`TURN` (a consumer spending more than
``TURN / TURN_EVENTS`` s of CPU per event without awaiting anything holds the loop longer)."""


class AsyncFetcher(FetchCore[T]):
    """Buffers, reads and hands out the events of a reader's owned segments, on
    ``redis.asyncio``, in one event loop (a reader whose other tasks change the segment table
    guards it with its hand-out gate: see ``unlocked``). The segment table,
    ``take_one``, ``take``, ``seek``, ``hold``/``serve``, ``moved_past``, ``epochs_of``,
    ``looks``/``commit_limits`` are :class:`~readergroup.client.fetch_core.FetchCore`'s
    (synchronous: they never wait)."""

    def __init__(
        self,
        reads: AsyncReads,
        serializer: Serializer[T],
        config: ReaderConfig,
        outage: Outage,
        clock: Clock,
        *,
        switches: int = 0,
    ) -> None:
        super().__init__(
            serializer, config, outage, clock, cluster=reads.cluster, switches=switches
        )
        self._reads = reads
        self._now = clock.monotonic
        self._turn_ends = 0.0
        self._countdown = 1
        self.unlocked: Callable[[], AbstractAsyncContextManager[Any]] = nullcontext
        """Wraps every wait of :meth:`fetch` for Redis (as the threaded fetcher's ``unlocked``):
        a reader whose other tasks change the segment table (a group session's maintenance)
        holds its hand-out gate, an ``asyncio.Lock``, around the fetcher's calls and lets go
        of it only there. Elsewhere a plan may await a segment's log (``Ask``) in the middle
        of a decision, with the gate held."""
        self._running: set[asyncio.Future[Any]] = set()
        """The tasks of the reads this fetcher started and that have not finished (given up
        ones too, until their cancellation has closed their connections)."""

    async def fetch(
        self, block: float, logs: Mapping[str, str], *, hold: float = 0.0, switches: int = 0
    ) -> FetchOutcome:
        """See :meth:`FetchCore.plan_fetch`."""
        return await self._run(self.plan_fetch(block, logs, hold, switches))

    async def collect(self, timeout: float) -> bool:
        """See :meth:`FetchCore.plan_collect`."""
        return await self._run(self.plan_collect(timeout))

    async def read_ahead(self) -> None:
        """See :meth:`FetchCore.plan_read_ahead`."""
        await self._run(self.plan_read_ahead())

    async def check_idle(self) -> None:
        """See :meth:`FetchCore.plan_check_idle`."""
        await self._run(self.plan_check_idle())

    async def verify(self, keys: Iterable[SegKey]) -> list[SegKey]:
        """See :meth:`FetchCore.plan_verify`."""
        return await self._run(self.plan_verify(keys))

    async def histories(
        self, segments: Sequence[OwnedSegment]
    ) -> dict[SegKey, tuple[int, list[tuple[int, int]]]]:
        """See :meth:`FetchCore.plan_histories`."""
        return await self._run(self.plan_histories(segments))

    async def take_refilled(self, max_events: int) -> list[EventRead[T]]:
        """:meth:`~FetchCore.take` after applying a read ahead that has arrived when fewer than
        ``max_events`` are buffered (the threaded ``take(refill=True)``; never waits for
        Redis)."""
        if self._ahead and sum(len(o.buffer) for o in self.owned.values()) < max_events:
            await self.collect(0.0)
        return self.take(max_events)

    def turn_due(self) -> bool:
        """Whether a consumer handing out events on the fast path should :meth:`take_turn` now:
        :data:`TURN` s passed since it last did (the clock is read every
        :data:`TURN_EVENTS` calls: this runs once per event)."""
        self._countdown -= 1
        if self._countdown > 0:
            return False
        self._countdown = TURN_EVENTS
        return self._now() >= self._turn_ends

    async def take_turn(self) -> None:
        """Yield to the event loop once, so a consumer with events buffered does not starve the
        loop's other tasks (heartbeats, maintenance, reads ahead, other readers)."""
        await asyncio.sleep(0)
        self._turn_ends = self._now() + TURN

    async def aclose(self) -> None:
        """:meth:`~FetchCore.close`, then wait until every read it started (and those given
        up before) has let go of its connection."""
        self.close()
        if self._running:
            await asyncio.wait(self._running)

    async def _run(self, plan: Plan[R]) -> R:
        """Run ``plan``, performing its effects. A cancellation requested while an effect was
        awaited is raised into the plan even when the await swallowed it (its outcome is
        dropped: nothing of it was applied, so it is read again): Python 3.11's
        ``asyncio.wait_for`` returns the result of an operation that finishes as the
        cancellation lands, and redis-py's asyncio client sends every command through it, so a
        task cancelled there went on reading."""
        task = asyncio.current_task()
        done, value = core.advance(plan, None, None)
        while not done:
            asked = task.cancelling() if task is not None else 0
            try:
                outcome, error = await self._perform(value), None
                if task is not None and task.cancelling() > asked:
                    raise asyncio.CancelledError  # (swallowed below)
            except BaseException as exc:  # thrown into the plan (a cancellation passes through)
                outcome, error = None, exc
            done, value = core.advance(plan, outcome, error)
        result: R = value
        return result

    async def _perform(self, effect: core.Effect) -> Any:
        reads = self._reads
        if isinstance(effect, core.Ask):
            return await getattr(reads, effect.method)(*effect.args)
        if isinstance(effect, core.Start):
            started = reads.start(effect.positions, effect.limit, effect.block)
            if effect.segments:
                started.task.add_done_callback(_flatten)
            self._running.add(started.task)
            started.task.add_done_callback(self._running.discard)
            return started
        waiting = isinstance(effect, core.Pause) or effect.wait
        async with self.unlocked() if waiting else nullcontext():
            if isinstance(effect, core.Read):
                return await reads.read_keys(effect.positions, effect.block, effect.limit)
            if isinstance(effect, core.Ready):
                return await cast(AsyncPendingRead, effect.read).ready(effect.timeout)
            if isinstance(effect, core.Receive):
                return await cast(AsyncPendingRead, effect.read).result(effect.timeout)
            if isinstance(effect, core.Pause):
                await asyncio.sleep(effect.seconds)
            return None


def _flatten(task: asyncio.Future[dict[str, Any]]) -> None:
    """Make the entries of a read ahead's reply (key -> raw entries) events of
    :func:`~readergroup.storage.segment_records.stored_events` as soon as it arrives: the
    reply's lists (two per event, tracked by Python's garbage collector) are freed now, not
    after waiting in the task, surviving collections and being promoted to the oldest
    generation (whose growth triggers full collections: the loop held for milliseconds).
    Entries that do not parse are left raw: applying them reports the problem, as before."""
    if task.cancelled() or task.exception() is not None:
        return
    reply = task.result()
    for key, entries in reply.items():
        try:
            reply[key] = stored_events(entries)
        except Exception:  # noqa: S112 (reported when applied: see above)
            continue
