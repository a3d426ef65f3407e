"""``EventStreamReader``: one member of a reader group, reading the segments it owns.

The reader is a thin facade over two parts:

* a :class:`~readergroup.client.fetcher.Fetcher` (the data side): buffers of the owned
  segments, their reads, contiguity checks and the hand-out of events;
* a :class:`~readergroup.client.group_session.GroupSession` (the group side): membership and
  its heartbeat thread, rebalance, commits, checkpoints, resets, completion of sealed segments,
  fencing.

A read call serves buffered events; when none are buffered it fetches with one ``XREAD BLOCK``
over every owned segment *and* the group's state log and the streams' metadata logs (so a
rebalance or a scale wakes it at once, with no polling). While the fetcher finds more waiting,
it reads ahead so round trips overlap the application's processing.

Group maintenance (refresh, rebalance, commits, completion, checkpoint acknowledgements) runs
on the session's maintenance thread, started by the first read call, never on the reading
thread: a read call with buffered events returns them without any group round trip, and the
group is maintained while the application holds events without reading (see
:mod:`~readergroup.client.maintenance` for the locking, and
:mod:`~readergroup.core.reader_machine` for every transition of what may be handed out).
Rebalance listeners are called on the reading thread, inside a read call, before it hands out
anything.

Fast path: while the session's window is open (see ``GroupSession.quiet_until``: nothing
awaits the reading thread) and events are buffered, ``read_next_event`` does O(1) work: one
clock read, two stores of the gate's ``busy`` flag, a look at three flags, one event out of a
buffer. ``read_batch`` (and so ``run``) and iteration take the same path. Otherwise a read call
takes the slow path under the gate's lock: a checkpoint due, errors, buffered events, or one
fetch at least (even past its timeout) when nothing is buffered, so data keeps flowing on a
slow link.

Positions: for each owned segment the reader tracks *returned* (after the last event handed
out) and *consumed* (after the last event the application moved past: every event returned
before the current read call, commit-on-get). Auto-commit and releases use *consumed*; manual
mode commits *returned* on ``commit()`` and releases at the committed position. Either way an
event is never skipped: a crash re-delivers from the last commit (at-least-once).

Fencing: a reader that has not renewed its heartbeat within ``session_timeout`` (on its own
monotonic clock, measured from when the last successful heartbeat was *sent*) stops handing out
events and raises :class:`ReaderNotInGroupError`; by then other members may have taken its
segments, and its commits are refused by the state's conditional updates.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from readergroup.admin.group_member import GroupMember
from readergroup.client import stop_signals
from readergroup.client.event_read import NOTHING, EventRead, RebalanceListener
from readergroup.client.fetcher import Fetcher, Outage
from readergroup.client.group_session import REJOIN_MAX_DELAY, GroupSession
from readergroup.client.runner import RunStats, run
from readergroup.client.serializers import Serializer
from readergroup.core.errors import ReaderClosedError, ReaderNotInGroupError, ReaderReplacedError
from readergroup.core.group_config import ReaderConfig, ReaderGroupConfig
from readergroup.core.group_state import SegKey
from readergroup.storage.connection_api import Connection
from statesync.clock import Clock
from statesync.system_clock import SYSTEM_CLOCK, monotonic_of

__all__ = ["REJOIN_MAX_DELAY", "EventRead", "EventStreamReader", "RebalanceListener"]

T = TypeVar("T")


class EventStreamReader(Generic[T]):
    """Reads events of type ``T`` as member ``reader_id`` of a reader group.

    Create with :meth:`EventStreamClientFactory.create_reader`. Use as a context manager or an
    iterator (``for event in reader``). Only one thread may read; ``close`` may come from any.
    """

    def __init__(
        self,
        connection: Connection,
        member: GroupMember,
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
        """The clock's ``monotonic``, without the wrapper for the system clock (fast path)."""
        self._member = member
        self.reader_id = member.reader_id
        outage = Outage(member.reader_id, group_config.session_timeout)
        self._fetcher: Fetcher[T] = Fetcher(
            connection, serializer, config or ReaderConfig(), outage, self._clock
        )
        self._session: GroupSession[T] = GroupSession(
            connection,
            member,
            group_config,
            self._fetcher,
            outage,
            clock=self._clock,
            rng=rng or random.Random(),  # noqa: S311 (backoff jitter, not secrets)
        )
        self._gate = self._session.gate
        self._fetcher.unlocked = self._gate.released
        self._stop_iteration = threading.Event()
        self._signal_handlers: dict[int, Any] = {}

    @property
    def _stop(self) -> threading.Event:
        """Set to stop heartbeats (tests simulate a crash with it)."""
        return self._session.stop

    # -- public API -------------------------------------------------------------------------
    @property
    def commit_mode(self) -> str:
        """The group's commit mode: ``"auto"`` or ``"manual"`` (see ReaderGroupConfig)."""
        return self._group.commit_mode

    @property
    def generation(self) -> int:
        return self._member.generation

    def add_rebalance_listener(self, listener: RebalanceListener) -> None:
        """Hear of this reader's segment changes (see :class:`RebalanceListener`: called on the
        reading thread, inside a read call, before it hands out anything)."""
        self._session.add_listener(listener)

    def owned_segments(self) -> dict[SegKey, int]:
        """Owned segment -> fencing token."""
        owned_now = self._fetcher.owned.copy()  # (the maintenance thread may change it)
        return {key: owned.token for key, owned in owned_now.items()}

    def assignment(self) -> set[SegKey]:
        """The segments this reader owns now (Kafka's ``assignment``)."""
        return set(self.owned_segments())

    def seek(self, segment: SegKey, offset: int) -> None:
        """Hand out ``segment``'s events from ``offset`` on (Kafka's ``seek``): the next event
        of it handed out is the one at ``offset``. For an owned segment
        (SegmentNotOwnedError otherwise); the typical place is ``on_segments_acquired``,
        resuming from positions the application keeps in its own database (with the
        segment's fencing token, see :meth:`fencing_token`). Commits go on from there as
        usual (auto mode commits it at the next interval). Reading thread, or a listener."""
        self._session.seek(segment, offset)

    def position(self, segment: SegKey) -> int:
        """The offset of the next event of owned ``segment`` to be handed out."""
        return self._session.position(segment)

    def committed(self) -> dict[SegKey, int]:
        """The group's committed position of each owned segment (where a new owner would
        start)."""
        return self._session.committed()

    def pause(self, segments: Iterable[SegKey]) -> None:
        """Hand out nothing of ``segments`` (owned ones; Kafka's ``pause``) until
        :meth:`resume`: they stay owned (heartbeats and the group go on), their reads stop
        once their buffers are full, and a read call still runs the group's work (listeners,
        releases, checkpoints). A paused segment given up by a rebalance is no longer
        paused."""
        self._session.pause(list(segments))

    def resume(self, segments: Iterable[SegKey]) -> None:
        """Hand out ``segments`` again (see :meth:`pause`)."""
        self._session.resume(list(segments))

    def paused(self) -> set[SegKey]:
        """The segments paused now."""
        with self._gate.lock:
            return set(self._session.machine.paused)

    def fencing_token(self, stream: str, segment: int) -> int | None:
        owned = self._fetcher.owned.get((stream, segment))
        return None if owned is None else owned.token

    def read_next_event(self, timeout: float | None = None) -> EventRead[T]:
        """The next event of any owned segment, or ``EventRead(None)`` after ``timeout`` s
        (default: ``group_refresh_time``). Raises ReaderNotInGroupError once fenced."""
        session, gate = self._session, self._gate
        now = self._now()
        gate.busy = True  # before the window is looked at (see HandOutGate)
        try:
            if now < session.quiet_until and session.fenced is None and not self._fetcher.errors:
                event = self._fetcher.take_one()
                if event is not None:
                    session.last_poll = now
                    return event
        finally:
            gate.busy = False
        batch = self._read_slowly(
            1, self._group.group_refresh_time if timeout is None else timeout, now
        )
        return batch[0] if batch else NOTHING

    def is_end_of_data(self) -> bool:
        """Whether this reader's bounded group has read every segment to its end cut."""
        return self._session.end_of_data

    def read_batch(
        self, max_events: int = 1000, timeout: float | None = None
    ) -> list[EventRead[T]]:
        """Up to ``max_events`` events at once (for throughput); empty after ``timeout``."""
        if max_events < 1:
            raise ValueError("max_events must be >= 1")
        return self._read(
            max_events, self._group.group_refresh_time if timeout is None else timeout
        )

    def commit(self, positions: Mapping[SegKey, int] | None = None) -> None:
        """Commit how far the application has processed: by default every returned event;
        or the given ``segment -> position`` (segments no longer owned are refused)."""
        self._session.check_usable()
        self._session.commit(positions)

    def run(
        self, handler: Callable[[EventRead[T]], Any], *, max_workers: int = 4, **options: Any
    ) -> RunStats:
        """Handle events with ``handler`` in ``max_workers`` threads, each segment strictly in
        order, committing after the handler returns; stops on SIGINT/SIGTERM or ``stop``.
        See :func:`readergroup.client.runner.run`."""
        return run(self, handler, max_workers=max_workers, **options)

    def close(self, *, leave: bool = True) -> None:
        """Graceful leave: tell the listeners the segments are released (on this thread: a
        commit there lands); acknowledge a checkpoint handed out (at the positions it was
        handed out at, as the next read would); in auto mode commit everything returned and
        give segments back there; in manual mode give them back at the last committed
        positions. Then stop.

        ``leave=False`` is Kafka's static leave: the same, but the reader stays a member and
        keeps its segments until its session expires, so a restart under the same id within
        the session takes them over at once and no other reader moves (a rolling restart
        moves nothing)."""
        self._session.close(leave=leave)
        self._fetcher.close()
        stop_signals.restore(self._signal_handlers)
        self._signal_handlers = {}

    def __enter__(self) -> EventStreamReader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def install_signal_handlers(self) -> None:
        """Have SIGTERM and SIGINT end iteration cleanly (main thread only): the event being
        handled is finished, ``for event in reader`` ends within ``group_refresh_time``, and
        leaving ``with reader:`` (or ``close()``) commits what was handled and gives the
        segments back at once, so nothing is delivered twice and nobody waits for a session
        to expire. The previous handlers come back when the reader is closed. The shutdown
        recipe::

            with factory.create_reader("worker-1", "billing", serializer) as reader:
                reader.install_signal_handlers()
                for event in reader:
                    handle(event)
        """
        if not self._signal_handlers:
            self._signal_handlers = stop_signals.install(self._stop_iteration)

    def stop_iteration(self) -> None:
        """End ``for event in reader`` after the event being handled (any thread; what the
        signal handlers call). Read calls are not affected."""
        self._stop_iteration.set()

    def __iter__(self) -> Iterator[EventRead[T]]:
        """Yield events until the reader is closed or :meth:`stop_iteration` is called
        (timeouts are skipped). A fenced reader (its session expired, e.g. during a Redis
        outage) rejoins by itself (:meth:`rejoin`)."""
        session = self._session
        stopping = self._stop_iteration
        while not session.closed and not stopping.is_set():
            try:
                event = self.read_next_event()
            except ReaderClosedError:
                return  # closed by another thread: iteration ends
            except ReaderReplacedError:
                raise  # a newer incarnation of this id runs: this one must stop
            except ReaderNotInGroupError:
                if session.closed:
                    return
                self.rejoin()
                continue
            if event.is_event or event.is_checkpoint:  # not NOTHING; a value may be None
                yield event

    def rejoin(self, stop: threading.Event | None = None) -> int:
        """Join the group again after being fenced, as a new generation under the same id;
        return the generation (``-1`` if ``stop`` was set or the reader closed first).

        Retries with jittered backoff (capped at :data:`REJOIN_MAX_DELAY` s) for as long as
        Redis cannot be reached or the previous session still looks alive; any other error is
        raised. Segments start over from the group's committed positions, so events handed
        out after the last commit come again (at-least-once). Reading thread only."""
        return self._session.rejoin(stop)

    # -- reading ----------------------------------------------------------------------------
    def _read(self, max_events: int, timeout: float) -> list[EventRead[T]]:
        session, fetcher, gate = self._session, self._fetcher, self._gate
        now = self._now()
        gate.busy = True  # before the window is looked at (see HandOutGate)
        try:
            if now < session.quiet_until and session.fenced is None and not fetcher.errors:
                fetcher.consume_returned()
                events = fetcher.take(max_events, refill=True)
                if events:
                    session.last_poll = now
                    return events
        finally:
            gate.busy = False
        return self._read_slowly(max_events, timeout, now)

    def _read_slowly(self, max_events: int, timeout: float, now: float) -> list[EventRead[T]]:
        """Serve data under the gate's lock: a checkpoint due, buffered events, or what one
        fetch brings (always at least one fetch, even past ``timeout``, when nothing is
        buffered; the lock is let go while it waits). No group round trip: the maintenance
        thread makes those."""
        session = self._session
        session.start_maintenance()
        with self._gate.lock:
            try:
                return session.serve(max_events, timeout, now)
            finally:
                session.settle()
