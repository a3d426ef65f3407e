"""``AsyncEventStreamReader``: one member of a reader group, for asyncio code.

The same reader as the threaded :class:`~readergroup.client.reader.EventStreamReader`, over the
same decisions: its group side is :class:`~readergroup.aio.session.AsyncGroupSession` (the
threaded session's steps, with the heartbeat and the group maintenance as tasks of the loop)
and its data side an :class:`~readergroup.client.aio_fetcher.AsyncFetcher` (the threaded
fetcher's core; reads ahead and parked ``XREAD BLOCK`` as tasks). It joins a group with sync
readers as one of them: the same protocol, the same state in Redis.

Read calls of one reader are served one at a time (a second task's call waits for the first);
``async for`` and the read calls take the fast path while events are buffered and nothing
awaits the reader (one event out of a buffer, no await, a turn of the loop every
millisecond or so).

Cancellation: a task cancelled in a read call loses nothing: events leave their buffers only
when a call returns them (the fetcher's hand-out never awaits), and what a cancelled fetch had
read is read again or taken by the next call; the reader stays usable. Closing (``await
reader.close()``, ``async with``) stops the heartbeat and maintenance tasks and leaves the
group as the threaded reader does.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Generic, TypeVar

from readergroup.admin.aio_group_member import AsyncGroupMember
from readergroup.aio.session import AsyncGroupSession
from readergroup.client.aio_fetcher import AsyncFetcher
from readergroup.client.event_read import NOTHING, EventRead, RebalanceListener
from readergroup.client.fetch_core import Outage
from readergroup.client.serializers import Serializer
from readergroup.core.errors import ReaderClosedError, ReaderNotInGroupError, ReaderReplacedError
from readergroup.core.group_config import ReaderConfig, ReaderGroupConfig
from readergroup.core.group_state import SegKey
from readergroup.storage.aio_reader_connection import AsyncReaderConnection
from statesync.clock import Clock
from statesync.system_clock import SYSTEM_CLOCK, monotonic_of

T = TypeVar("T")


class AsyncEventStreamReader(Generic[T]):
    """Reads events of type ``T`` as member ``reader_id`` of a reader group, in one event loop.

    Create with :meth:`AsyncEventStreamClientFactory.create_reader
    <readergroup.aio.factory.AsyncEventStreamClientFactory.create_reader>`. Use with ``async
    with`` and ``async for event in reader``. Rebalance listeners may be plain objects or have
    coroutine methods (awaited, in the reading task, before the read call hands out anything).
    """

    def __init__(
        self,
        connection: AsyncReaderConnection,
        member: AsyncGroupMember,
        group_config: ReaderGroupConfig,
        serializer: Serializer[T],
        config: ReaderConfig | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._group = group_config
        self._clock = clock or SYSTEM_CLOCK
        self._now = monotonic_of(self._clock)
        self._member = member
        self.reader_id = member.reader_id
        outage = Outage(member.reader_id, group_config.session_timeout)
        self._fetcher: AsyncFetcher[T] = AsyncFetcher(
            connection.reads,
            serializer,
            config or ReaderConfig(),
            outage,
            self._clock,
            switches=connection.primary_switches(),
        )
        self._session: AsyncGroupSession[T] = AsyncGroupSession(
            connection,
            member,
            group_config,
            self._fetcher,
            outage,
            clock=self._clock,
            rng=rng or random.Random(),  # noqa: S311 (backoff jitter, not secrets)
        )
        self._reading = asyncio.Lock()
        self._stopping = False

    @property
    def _stop(self) -> asyncio.Event:
        """Set to stop heartbeats (tests simulate a crash with it, as with the threaded
        reader's)."""
        return self._session.stop

    # -- the reader's state (no I/O) ---------------------------------------------------------
    @property
    def commit_mode(self) -> str:
        """The group's commit mode: ``"auto"`` or ``"manual"``."""
        return self._group.commit_mode

    @property
    def generation(self) -> int:
        return self._member.generation

    def add_rebalance_listener(self, listener: RebalanceListener | Any) -> None:
        """Hear of this reader's segment changes (see
        :class:`~readergroup.client.event_read.RebalanceListener`); its methods may be
        coroutine functions."""
        self._session.add_listener(listener)

    def owned_segments(self) -> dict[SegKey, int]:
        """Owned segment -> fencing token."""
        return {key: owned.token for key, owned in self._fetcher.owned.items()}

    def assignment(self) -> set[SegKey]:
        """The segments this reader owns now."""
        return set(self._fetcher.owned)

    def seek(self, segment: SegKey, offset: int) -> None:
        """See :meth:`EventStreamReader.seek <readergroup.client.reader.EventStreamReader.seek>`."""
        self._session.seek(segment, offset)

    def position(self, segment: SegKey) -> int:
        """The offset of the next event of owned ``segment`` to be handed out."""
        return self._session.position(segment)

    def committed(self) -> dict[SegKey, int]:
        """The group's committed position of each owned segment."""
        return self._session.committed()

    def pause(self, segments: Iterable[SegKey]) -> None:
        """Hand out nothing of ``segments`` until :meth:`resume` (they stay owned)."""
        self._session.pause(list(segments))

    def resume(self, segments: Iterable[SegKey]) -> None:
        self._session.resume(list(segments))

    def paused(self) -> set[SegKey]:
        return set(self._session.machine.paused)

    def fencing_token(self, stream: str, segment: int) -> int | None:
        owned = self._fetcher.owned.get((stream, segment))
        return None if owned is None else owned.token

    def is_end_of_data(self) -> bool:
        """Whether this reader's bounded group has read every segment to its end cut."""
        return self._session.end_of_data

    # -- reading -----------------------------------------------------------------------------
    async def read_next_event(self, timeout: float | None = None) -> EventRead[T]:
        """The next event of any owned segment, or ``EventRead(None)`` after ``timeout`` s
        (default: ``group_refresh_time``). Raises ReaderNotInGroupError once fenced."""
        session, fetcher = self._session, self._fetcher
        now = self._now()
        if now < session.quiet_until and session.machine.removed is None and not fetcher.errors:
            if fetcher.turn_due():  # (before an event is taken: a cancellation here loses none)
                await fetcher.take_turn()
            event = self._take_fast(now)
            if event is not None:
                return event
        return await self._next_slowly(timeout, now)

    def _take_fast(self, now: float) -> EventRead[T] | None:
        """The fast path's hand-out (never awaits): the next buffered event if the reader may
        hand it out at once (quiet, a member, no error pending), else ``None``."""
        session, fetcher = self._session, self._fetcher
        if now < session.quiet_until and session.machine.removed is None and not fetcher.errors:
            event = fetcher.take_one()
            if event is not None:
                session.last_poll = now
                return event
        return None

    async def _next_slowly(
        self, timeout: float | None, now: float, *, iterating: bool = False
    ) -> EventRead[T]:
        """``read_next_event``'s slow path (``iterating``: ``async for``'s, see
        :class:`_Events`)."""
        batch = await self._read_slowly(
            1, self._group.group_refresh_time if timeout is None else timeout, now, iterating
        )
        return batch[0] if batch else NOTHING

    async def read_batch(
        self, max_events: int = 1000, timeout: float | None = None
    ) -> list[EventRead[T]]:
        """Up to ``max_events`` events at once; empty after ``timeout``."""
        if max_events < 1:
            raise ValueError("max_events must be >= 1")
        session, fetcher = self._session, self._fetcher
        now = self._now()
        await fetcher.take_turn()  # (before events are taken: a cancellation here loses none)
        if now < session.quiet_until and session.fenced is None and not fetcher.errors:
            fetcher.consume_returned()
            events = fetcher.take(max_events)
            if events:
                session.last_poll = now
                return events
        timeout = self._group.group_refresh_time if timeout is None else timeout
        return await self._read_slowly(max_events, timeout, now)

    async def _read_slowly(
        self, max_events: int, timeout: float, now: float, iterating: bool = False
    ) -> list[EventRead[T]]:
        """The slow path of a read call (the threaded reader's: the session's read-call
        steps), one call at a time."""
        session = self._session
        async with self._reading:
            session.start_maintenance()
            try:
                # not under the hand-out lock between calls: the fetcher's calls take it, no
                # other task's calls span an await under it, and nothing may be awaited
                # between the events leaving their buffers and this call returning them (a
                # cancellation there would lose them)
                return await session.serve(max_events, timeout, now, iterating=iterating)
            finally:
                session.settle()

    def __aiter__(self) -> AsyncIterator[EventRead[T]]:
        return _Events(self)

    def stop_iteration(self) -> None:
        """End ``async for event in reader`` after the event being handled (an idle iteration
        at once: its waiting read call ends with nothing)."""
        self._stopping = True
        self._session.interrupt_idle_wait()

    # -- the group ---------------------------------------------------------------------------
    async def commit(self, positions: Mapping[SegKey, int] | None = None) -> None:
        """Commit how far the application has processed: by default every returned event;
        or the given ``segment -> position``."""
        self._session.check_usable()
        await self._session.run(self._session.commit_steps(positions))

    async def rejoin(self) -> int:
        """Join the group again after being fenced (see
        :meth:`EventStreamReader.rejoin <readergroup.client.reader.EventStreamReader.rejoin>`)."""
        generation: int = await self._session.run(self._session.rejoin_steps())
        return generation

    async def close(self, *, leave: bool = True) -> None:
        """Graceful leave (or ``leave=False``: a static leave), as
        :meth:`EventStreamReader.close <readergroup.client.reader.EventStreamReader.close>`;
        then the reader's reads are stopped. Idempotent."""
        try:
            await self._session.run(self._session.close_steps(leave=leave))
        finally:
            await self._fetcher.aclose()

    async def __aenter__(self) -> AsyncEventStreamReader[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _Events(Generic[T]):
    """``async for event in reader``: events (and checkpoints) until the reader is closed or
    :meth:`~AsyncEventStreamReader.stop_iteration` is called (timeouts are skipped). A fenced
    reader rejoins by itself (:meth:`~AsyncEventStreamReader.rejoin`).

    Timeouts being skipped, an idle read call waits on the parked ``XREAD`` until that read's
    reply (it blocks up to :data:`~readergroup.storage.multi_read.MAX_PARKED_BLOCK_SECONDS` on the
    server) or the next idle look at the segments' logs, whichever is first, not
    :meth:`~readergroup.client.group_session.SessionSteps.longest_block`: what needs the call
    sooner ends that wait (a maintenance round beginning: the call goes on through its steps;
    :meth:`~AsyncEventStreamReader.stop_iteration` from another task: the iteration ends). A
    call that is not idle lasts up to ``longest_block()``.

    ``__anext__`` runs ``read_next_event``'s fast path itself (one coroutine per event, not an
    async generator's step around a second coroutine: the per-event cost of ``async for``)."""

    __slots__ = ("_fetcher", "_now", "_reader", "_session")

    def __init__(self, reader: AsyncEventStreamReader[T]) -> None:
        self._reader = reader
        self._session = reader._session
        self._fetcher = reader._fetcher
        self._now = reader._now

    def __aiter__(self) -> _Events[T]:
        return self

    async def __anext__(self) -> EventRead[T]:
        reader, session, fetcher = self._reader, self._session, self._fetcher
        while not session.closed and not reader._stopping:
            now = self._now()
            if now < session.quiet_until and session.machine.removed is None and not fetcher.errors:
                if fetcher.turn_due():  # (before an event is taken: see read_next_event)
                    await fetcher.take_turn()
                    event = reader._take_fast(now)  # (looked at again after the turn)
                else:
                    event = fetcher.take_one()
                    if event is not None:
                        session.last_poll = now
                if event is not None:
                    return event
            try:  # (a call as long as one wait: timeouts are skipped here)
                event = await reader._next_slowly(session.longest_block(), now, iterating=True)
            except ReaderClosedError:
                break
            except ReaderReplacedError:
                raise
            except ReaderNotInGroupError:
                if session.closed:
                    break
                await reader.rejoin()
                continue
            if event.is_event or event.is_checkpoint:
                return event
        raise StopAsyncIteration
