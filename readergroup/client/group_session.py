"""The group side of a reader: membership, rebalance, commits, checkpoints, resets, completion.

A :class:`GroupSession` runs one reader's membership through
:class:`~readergroup.admin.group_member.GroupMember` and keeps the reader's
:class:`~readergroup.client.fetcher.Fetcher` owning exactly the segments the group gives it:

* on its own **maintenance** thread (:mod:`~readergroup.client.maintenance`: the transitions
  and the locking between the threads are stated there), :meth:`GroupSession.maintain` commits
  (auto mode), rebalances (fair share: release, acquire), absorbs resets, queues and
  acknowledges checkpoints and completes sealed segments read to their end;
* a **heartbeat** thread renews the heartbeat, removes members whose session expired (judged on
  Redis server time), and gives the segments back when the application stopped reading for
  ``max_poll_interval``.

Fencing: a reader that has not renewed its heartbeat within ``session_timeout`` (on its own
monotonic clock, measured from when the last successful heartbeat was *sent*) drops its segments
and raises :class:`ReaderNotInGroupError`; by then other members may have taken them, and its
commits are refused by the state's conditional updates.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from readergroup.admin.group_member import GroupMember, segments_text
from readergroup.client.event_read import EventRead, RebalanceListener
from readergroup.client.fetch_core import FetchCore
from readergroup.client.fetcher import Fetcher, FetchOutcome, Outage, OwnedSegment
from readergroup.client.listener_calls import Telling, listener_calls, tell_steps
from readergroup.client.maintenance import HandOutGate, maintenance_steps
from readergroup.core.balance import segments_to_release
from readergroup.core.calls import Steps, call, drive
from readergroup.core.config import ClientConfig
from readergroup.core.errors import (
    CommitRefusedError,
    CoordinationError,
    ReaderAlreadyOnlineError,
    ReaderClosedError,
    ReaderGroupError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
    ReaderReplacedError,
    RebalanceListenerError,
    RedisUnavailableError,
    SegmentNotOwnedError,
    TruncatedDataError,
)
from readergroup.core.group_config import AUTO, ReaderGroupConfig
from readergroup.core.group_state import (
    NO_LAG,
    Assignment,
    GroupState,
    SegKey,
    readers_to_move,
)
from readergroup.core.group_state import STATE_TYPES as GROUP_STATE_TYPES
from readergroup.core.group_state import UPDATE_TYPES as GROUP_UPDATE_TYPES
from readergroup.core.lag import events_behind
from readergroup.core.names import split_scoped_stream, stream_sync_name
from readergroup.core.reader_machine import ReaderMachine, SegmentPhase
from readergroup.core.stream_metadata import STATE_TYPES, UPDATE_TYPES, StreamState
from readergroup.storage.connection_api import Connection
from readergroup.storage.keys import KeyLayout
from readergroup.storage.translate import translate_errors
from statesync import BadEntryError, SynchronizerNotFoundError, Update
from statesync.backend import wake_revision, wakes_follower
from statesync.clock import Clock

T = TypeVar("T")

logger = logging.getLogger(__name__)

MAINTENANCE_POLL = 0.02
"""Longest wait (s) of a fetch while the maintenance thread has a round under way: a fetch
cannot be woken by segments adopted or a checkpoint queued meanwhile, so it looks again soon."""

REJOIN_MAX_DELAY = 2.0
"""Cap (seconds) of the jittered backoff between attempts to rejoin after being fenced."""


class WakeKeys(Protocol):
    """What a session's steps use of a connection without I/O: key names and the client
    config (the I/O goes through its driver: see :class:`SessionSteps`)."""

    @property
    def config(self) -> ClientConfig: ...

    @property
    def keys(self) -> KeyLayout: ...

    def wake_on(
        self, sync_name: str, after_revision: int, *, wakes_only: bool
    ) -> tuple[str, str]: ...

    def follower_wake_on(
        self, sync_name: str, after_revision: int, follower: str
    ) -> tuple[str, str]: ...

    def synchronizer(
        self, name: str, update_types: Sequence[type[Update]], state_types: Sequence[type] = ()
    ) -> Any:
        """A synchronizer of ``name`` (threaded or asyncio: the steps call its I/O through
        their driver's ``follow`` and ``fetch_updates``)."""


class Signal(Protocol):
    """A flag one side sets and the other waits on (``threading.Event``, ``asyncio.Event``)."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...


class SessionSteps(Generic[T]):
    """One reader's life in its group, keeping ``fetcher``'s segments those the group gives:
    every decision of it, written once as call steps (:mod:`readergroup.core.calls`) that the
    threaded :class:`GroupSession` drives with threads and the asyncio session
    (:mod:`readergroup.aio.session`) with tasks. The steps' I/O, by the paths they call on
    their driver: ``member.*`` (its :class:`~readergroup.admin.group_member.GroupMember`, or
    the asyncio one), ``fetcher.histories``, ``segments.*`` (segment states and seals),
    ``follow``, ``fetch_updates``, ``fetch``, ``take_refilled``, ``invoke`` (a
    rebalance listener), ``group_lock.*``, ``backoff``, ``stopped_within``, ``wait_wake``,
    ``stop_background``, ``start_background``."""

    def __init__(
        self,
        connection: WakeKeys,
        member: Any,
        group_config: ReaderGroupConfig,
        fetcher: FetchCore[T],
        outage: Outage,
        *,
        clock: Clock,
        rng: random.Random,
        gate: Any,
        wake: Signal,
        stop: Signal,
    ) -> None:
        self._connection = connection
        self.member = member
        self._group = group_config
        self._fetcher = fetcher
        self.fetcher = fetcher
        self._outage = outage
        self._clock, self._rng = clock, rng
        self.reader_id = member.reader_id
        self.listeners: list[RebalanceListener] = []
        self.telling: Telling | None = None  # listener calls a read call still has to make
        self.machine = ReaderMachine(member.reader_id)
        """What this reader may hand out, and when (every transition is the machine's; it is
        changed only under the gate's lock)."""
        self._streams: dict[str, Any] = {}
        """Stream -> the synchronizer of its metadata (threaded or asyncio)."""
        self.gone = False
        """The group was deleted under this reader: every read raises ReaderGroupNotFoundError."""
        self.closed = False
        self._closing = False
        """``close()`` is telling the listeners: ``commit()`` still works (closed otherwise)."""
        self.quiet_until = 0.0
        """Until when (monotonic) reads may take the fast path (the gate's *window*): nothing is
        flagged for the reading thread, and the session is surely alive. Zeroed by whatever
        needs the reading thread's attention; reopened only by its slow path."""
        self.gate = gate
        """Hand-out vs changes to the segment table (see :mod:`~readergroup.client.maintenance`)."""
        self.wake = wake
        """Set to have the maintenance thread run a round now."""
        self._maintaining = False
        self._beat_failed = False
        self.stop = stop
        self.group_dirty = self._streams_dirty = True
        self._session = group_config.session_timeout
        now = self._clock.monotonic()
        self._last_refresh = self._last_commit = self.last_poll = self._last_beat_ok = now
        self._group_logs = (
            connection.wake_on(member.sync.name, -1, wakes_only=True)[0],
            connection.follower_wake_on(member.sync.name, -1, self.reader_id)[0],
        )
        """The group log's wake streams: the shared one (an entry per change every reader may
        have to act on; commits wake nobody) and this reader's own (an entry per change that
        names it: a move that gives it a move to make; others' moves do not wake it). An idle
        reader is woken by the membership and ownership changes that concern it only, and
        reads the group log once per wake-up."""
        self._woken_to: dict[str, int] = {}
        """State log key -> revision up to which the reading thread's fetch saw news and passed
        it on to the maintenance thread (forgotten once a round has acted on it)."""
        self._seen_revision = self._wake_seen = -1
        """``_seen_revision``: group-log revision the maintenance thread last acted on (the
        heartbeat thread may have fetched further; the reading thread must still be woken for
        those entries). ``_wake_seen``: newest wake-up of the group log looked at and found to
        be for other readers only (see :meth:`absorb`): the blocking fetch waits for wake-ups
        after it."""
        self._group_generation = -1
        self._watched_at = now
        """When (monotonic) the reading thread's fetch last watched the group's wake streams
        (news there wakes it): while it does, the maintenance thread need not look itself."""
        self._handled_checkpoints: set[str] = set()
        # owned segment -> its log's tail as the latest commit's look found it (for its lag)
        self._tails: dict[SegKey, int] = {}
        self.end_of_data = False
        self._stuck_at: dict[str, int] = {}
        """Synchronizer name -> revision of the bad entry it stopped at: the XREAD waits
        for entries after it (never transferring the bad one again and again)."""
        self._log_names: dict[str, str] = {}
        """State log key -> its synchronizer's name (for ``_woken_to``)."""
        self._bad_logs: set[str] = set()
        """State logs whose key has the wrong type: left out of the XREAD (their refresh
        reports the error)."""

    @property
    def fenced(self) -> str | None:
        """Why the reader is no longer a member (``None`` while it is)."""
        return self.machine.removed

    def add_listener(self, listener: RebalanceListener) -> None:
        with self.gate.lock:
            self.listeners.append(listener)
            self.machine.listeners = True

    def seek(self, key: SegKey, offset: int) -> None:
        """See :meth:`EventStreamReader.seek`."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0: {offset}")
        with self.gate.closed():
            if key not in self._fetcher.owned:
                raise SegmentNotOwnedError(f"reader {self.reader_id!r} does not own {key}")
            self._fetcher.seek(key, offset)
        logger.info("reader %r: %s/%d seeks to offset %d", self.reader_id, *key, offset)

    def committed(self) -> dict[SegKey, int]:
        """The group's committed position of every segment this reader owns."""
        with self.gate.lock:
            owned = {k: o.committed for k, o in self._fetcher.owned.items()}
        state = self.member.state
        return {
            k: max(p, state.assigned[k].position) if k in state.assigned else p
            for k, p in owned.items()
        }

    def position(self, key: SegKey) -> int:
        """The offset of the next event of ``key`` to hand out."""
        with self.gate.lock:
            owned = self._fetcher.owned.get(key)
            if owned is None:
                raise SegmentNotOwnedError(f"reader {self.reader_id!r} does not own {key}")
            return owned.returned

    def pause(self, keys: Sequence[SegKey]) -> None:
        """Hand out nothing of ``keys`` (owned ones) until :meth:`resume`; they stay owned."""
        with self.gate.closed():
            for key in self.machine.pause(keys):
                self._fetcher.hold(key)

    def resume(self, keys: Sequence[SegKey]) -> None:
        with self.gate.closed():
            for key in self.machine.resume(keys):
                self._fetcher.serve(key)

    def _removed(self, reason: str) -> None:
        """(Any thread.) The reader is no longer a member: nothing more is handed out; the
        reading thread's next call raises (and drops the segments: :meth:`fence`)."""
        with self.gate.lock:
            if self.machine.removed is None:
                logger.warning("%s", reason)
            self.machine.remove(reason)
            self.quiet_until = 0.0
        self.wake.set()

    # -- usability (reading thread) ----------------------------------------------------------
    def check_usable(self) -> None:
        """Raise if the reader may not hand out events: closed, group gone, or fenced (by the
        heartbeat thread, or because no heartbeat was renewed within the session timeout)."""
        if self.closed and not self._closing:
            raise ReaderClosedError(f"reader {self.reader_id!r} is closed")
        if self.gone:
            raise self.group_gone()
        self.check_lease()
        if self.fenced is not None:
            self.fence(self.fenced)  # the heartbeat thread may have set it: drop segments
            raise self.removal_error(self.fenced)

    def removal_error(self, reason: str) -> ReaderGroupError:
        """The error a read call of a removed reader raises: the group was deleted, a newer
        incarnation of this id replaced it (final), or it is no longer a member."""
        if self.gone:
            return self.group_gone()
        record = self.member.sync.state.readers.get(self.reader_id)
        if record is not None and record.generation > self.member.generation:
            return ReaderReplacedError(
                f"reader {self.reader_id!r} (generation {self.member.generation}) was replaced "
                f"by a newer incarnation (generation {record.generation}); this one stops"
            )
        return ReaderNotInGroupError(reason)

    def lease_ends(self) -> float:
        """When (the clock's monotonic seconds) the reader's lease ends unless a heartbeat is
        renewed meanwhile: the session timeout after the last renewal."""
        return self._last_beat_ok + self._session

    def check_lease(self) -> None:
        """Fence the reader if no heartbeat was renewed within the session timeout (its read
        call raises then)."""
        if self.fenced is None and self._clock.monotonic() > self.lease_ends():
            self.fence(
                f"reader {self.reader_id!r} could not renew its heartbeat within the session "
                f"timeout ({self._session}s); its segments may be owned by others now"
            )

    def group_gone(self) -> ReaderGroupNotFoundError:
        group = self.member.sync.name.removeprefix("group:")
        return ReaderGroupNotFoundError(
            f"reader group {group} of reader {self.reader_id!r} was deleted; it reads no more"
        )

    def fence(self, reason: str) -> None:
        """No longer a member: every segment is dropped (the application hears of them at its
        next read call, which raises)."""
        self.wake.set()  # the maintenance thread ends
        with self.gate.closed():
            lost = self._fetcher.clear()
            self.machine.remove(reason)
        if lost:
            logger.warning("reader %r fenced, segments lost: %s", self.reader_id, reason)

    def begin_read_steps(self) -> Steps[EventRead[T] | None]:
        """(Reading thread, under the gate's lock, at the start of a read call and before each
        of its fetches: nothing was handed out since the call began.) Carry out what the
        reader's machine says a read call must do first: tell the listeners of lost, released
        and acquired segments (with the gate's lock let go; first the calls a cancelled read
        call left to make: see :mod:`~readergroup.client.listener_calls`), raise if the reader
        was removed or closed, post a checkpoint's acknowledgement; returns the checkpoint to
        hand out before any event, if one is due."""
        machine, fetcher = self.machine, self._fetcher
        if self.telling is not None:
            yield from self._tell_listeners()
        step = machine.read_call()
        if step.ack:
            self.wake.set()  # the maintenance thread acknowledges it
        if step.freed:  # made releasable by this call: the maintenance thread sends them
            self.group_dirty = True
            self.wake.set()
        if step.lost or step.released or step.acquired or step.completed:
            released = (*step.completed, *step.released)
            calls = listener_calls(self.listeners, step.lost, released, step.acquired)
            self.telling = Telling(calls, step.released, step.acquired)
            yield from self._tell_listeners()
        if step.closed or self.closed:
            raise ReaderClosedError(f"reader {self.reader_id!r} is closed")
        if step.removed is not None:
            with self.gate.closed():
                fetcher.clear()
            raise self.removal_error(step.removed)
        if step.checkpoint is not None:
            name = machine.hand_out_checkpoint({k: o.returned for k, o in fetcher.owned.items()})
            self.quiet_until = 0.0  # acknowledged on the next read
            return EventRead(None, checkpoint_name=name)
        return None

    def _tell_listeners(self, *, quietly: bool = False) -> Steps[None]:
        """Make the listener calls of :attr:`telling` still to make (the gate's lock let go:
        they may commit, or read positions), then carry its change out: releases may be sent,
        acquired segments are handed out. A listener's exception is raised then, wrapped, once
        the change is carried out (``quietly``, as ``close()`` tells: only logged). A
        cancellation while a listener is awaited leaves the calls not made yet in
        :attr:`telling` for the next read call (or ``close()``)."""
        telling = self.telling
        assert telling is not None
        if quietly:  # (``close()``: the gate's lock is not held)
            yield from tell_steps(telling, self.reader_id)
        else:
            with self.gate.released():
                yield from tell_steps(telling, self.reader_id)
        self.telling = None
        machine = self.machine
        if telling.released:
            with self.gate.closed():
                machine.released_heard(telling.released)
            self.group_dirty = True
            self.wake.set()
        if telling.acquired:
            with self.gate.closed():
                for key in machine.acquired_heard(telling.acquired):
                    self._fetcher.serve(key)
        exc = telling.failure
        if exc is None:
            return
        logger.warning("reader %r: a rebalance listener raised", self.reader_id, exc_info=exc)
        if not quietly:
            failure = RebalanceListenerError(
                f"reader {self.reader_id!r}: a rebalance listener raised {exc!r}; the "
                "segments' changes were carried out all the same"
            )
            raise failure from exc

    # -- maintenance (the maintenance thread) ------------------------------------------------
    def maintenance_due_in(self) -> float:
        """Seconds until the next round is due (0: work was posted)."""
        if self.group_dirty or self._streams_dirty or self.machine.ack_due is not None:
            return 0.0
        due = self._last_refresh + self._group.group_refresh_time
        if self._group.commit_mode == AUTO:
            due = min(due, self._last_commit + self._group.auto_commit_interval)
        return max(0.0, due - self._clock.monotonic())

    def post_error(self, error: BaseException) -> None:
        """Have the next read call raise ``error`` (one at a time: a failure repeated round
        after round is raised once per read call)."""
        if not isinstance(error, ReaderGroupError):
            wrapped = ReaderGroupError(
                f"reader {self.reader_id!r}: group maintenance failed: {error!r}"
            )
            wrapped.__cause__ = error
            error = wrapped
        if not self._fetcher.errors:
            self._fetcher.errors.append(error)
        self.quiet_until = 0.0

    def _shut(self) -> None:
        self.quiet_until = 0.0

    def settle(self) -> None:
        """(Reading thread, slow path, under the gate's lock.) Reopen the fast path's window
        until the session's lease ends (in auto mode, until the next commit is due: a slow
        call then records what the application consumed), unless something awaits the
        reading thread."""
        if self.machine.needs_reader or self.closed or self.gone:
            self.quiet_until = 0.0
        else:
            until = self.lease_ends()
            if self._group.commit_mode == AUTO:
                until = min(until, self._last_commit + self._group.auto_commit_interval)
            self.quiet_until = until

    def consumed_recorded(self) -> None:
        """(Reading thread, slow path.) Every segment's consumed position is exact now: if an
        auto commit is due, have the maintenance thread make it at once."""
        if self._group.commit_mode == AUTO and (
            self._clock.monotonic() - self._last_commit >= self._group.auto_commit_interval
        ):
            self.wake.set()

    def maintain_steps(self) -> Steps[bool]:
        """One round: acknowledge a checkpoint the application moved past, then commit,
        rebalance and complete as due; False if Redis could not be reached (retry after a
        backoff). Fencing, outages, a deleted group and bad log entries are handled (and
        re-raised when the reader must end with them)."""
        yield from call("group_lock.acquire")
        try:
            self._maintaining = True
            with translate_errors("read"):
                yield from self._acknowledge_checkpoint()
                yield from self._maintain()
            return True
        except ReaderNotInGroupError as exc:
            self.fence(str(exc))
            raise
        except RedisUnavailableError as exc:  # buffered events still go out; then back off
            self._outage.lost(exc)
            self.check_usable()  # past the session: fenced
            return False
        except ReaderGroupError as exc:
            if (yield from self._group_deleted(exc)):
                yield from self._on_group_deleted()
                raise self.group_gone() from exc
            if isinstance(exc, CoordinationError):
                self._note_bad_entry(exc)
            raise
        finally:
            self._maintaining = False
            self.group_lock.release()

    def maintenance_under_way(self) -> bool:
        """Whether the maintenance thread has work posted or a round under way (its outcome,
        such as segments to read or a checkpoint, may concern the reading thread soon)."""
        return self.machine.needs_reader or (self.maintenance_posted() and self.background_alive())

    def maintenance_posted(self) -> bool:
        """Whether work is posted to the maintenance thread (task) or a round is under way."""
        return (
            self._maintaining
            or self.group_dirty
            or self._streams_dirty
            or self.machine.ack_due is not None
        )

    def background_alive(self) -> bool:
        """Whether the maintenance thread (task) runs."""
        raise NotImplementedError  # each driver's own

    @property
    def group_lock(self) -> Any:
        """Serializes group round trips: maintenance rounds, ``commit()``, ``close()``
        (re-entrant: a listener may commit while ``close()`` tells it)."""
        raise NotImplementedError  # each driver's own

    def _maintain(self) -> Steps[None]:
        """Commit, rebalance and complete as due. Intervals count from the end of the previous
        round.

        Wake-ups drive the group work: a change on the group's wake stream or a stream's
        metadata log (seen by the reading thread's blocking fetch) marks it dirty. Every
        ``group_refresh_time`` the reader also acts on group entries the heartbeat thread
        fetched (a lost wake-up, or the application not reading) and completes segments read
        to their known end, without asking Redis."""
        now = self._clock.monotonic()
        refresh_due = now - self._last_refresh >= self._group.group_refresh_time
        yield from self.send_rewinds()
        if (
            self._group.commit_mode == AUTO
            and now - self._last_commit >= self._group.auto_commit_interval
        ):
            if self._auto_positions():
                yield from self._absorb_reset()  # never commit positions of a left generation
                yield from self._commit(self._auto_positions())
            self._last_commit = self._clock.monotonic()
        if refresh_due:
            self._last_refresh = now  # a failed round is not retried before the next is due
        if self.group_dirty or (refresh_due and (self._behind() or self._unwatched(now))):
            self.group_dirty = False
            self._last_refresh = now
            yield from self._rebalance()
            self._woken_to.pop(self.member.sync.name, None)
        if self._streams_dirty or refresh_due:
            follow, self._streams_dirty = self._streams_dirty, False
            yield from self._complete_finished(follow=follow)
            if follow:
                for name in list(self._woken_to):  # (the reading thread may add to it)
                    if name != self.member.sync.name:
                        self._woken_to.pop(name, None)
        if self._last_refresh == now:
            self._last_refresh = self._clock.monotonic()

    def _unwatched(self, now: float) -> bool:
        """Whether no fetch of the reading thread watched the group's wake streams within the
        last ``group_refresh_time`` (it is handing out buffered events, or the application is
        not reading): the maintenance thread then reads the group log itself, so the reader's
        state shows a checkpoint or its removal within ``group_refresh_time``."""
        return now - self._watched_at >= self._group.group_refresh_time

    def _behind(self) -> bool:
        """Whether the heartbeat thread's fetch met group entries this thread has not acted on
        (their wake-up was lost), or a bad entry this thread has not reported yet."""
        sync = self.member.sync
        return sync.revision != self._seen_revision or sync.fetch_error is not None

    def _auto_positions(
        self, owned: Mapping[SegKey, OwnedSegment] | None = None
    ) -> dict[SegKey, tuple[int, int]]:
        with self.gate.lock:
            table = self._fetcher.owned if owned is None else owned
            return {k: (o.token, o.consumed) for k, o in table.items() if o.consumed > o.committed}

    def _release_position(self, owned: OwnedSegment) -> int:
        return owned.consumed if self._group.commit_mode == AUTO else owned.committed

    def commit_steps(self, positions: Mapping[SegKey, int] | None) -> Steps[None]:
        """Commit ``positions`` (segment -> position) of owned segments, or by default every
        event returned (:meth:`EventStreamReader.commit`)."""
        yield from call("group_lock.acquire")
        try:
            with self.gate.lock:
                owned_now = self._fetcher.owned
                if positions is None:
                    chosen = {
                        k: (o.token, o.returned)
                        for k, o in owned_now.items()
                        if o.returned > o.committed
                    }
                else:
                    chosen = {}
                    for key, position in positions.items():
                        owned = owned_now.get(key)
                        if owned is None:
                            raise SegmentNotOwnedError(
                                f"reader {self.reader_id!r} does not own {key}"
                            )
                        chosen[key] = (owned.token, position)
            refused = yield from self._commit(chosen)
        finally:
            self.group_lock.release()
        if refused:
            raise CommitRefusedError(
                f"reader {self.reader_id!r}: commit of {_refused_text(refused)} refused: the "
                "segments' logs no longer hold those positions (a failover lost them); the "
                "other positions were committed. Retry later: a writer's retry may append the "
                "same events again, or the next read reports the loss",
                refused,
            )

    def _commit(
        self,
        positions: Mapping[SegKey, tuple[int, int]],
        *,
        table: Mapping[SegKey, OwnedSegment] | None = None,
    ) -> Steps[dict[SegKey, tuple[int, int]]]:
        """Commit ``positions``, with the epochs they were read under; returns those refused
        (segment -> (position, where its log ends)). A position past what the segment's log
        holds now (a failover lost its tail) is refused: the logs are looked at first (one
        round trip, outside the gate's lock), and the reading thread's next fetch looks again
        and reports the loss (see :meth:`Fetcher.verify`: not while the log is only shorter,
        within ``shrunk_log_grace``). A failover between this look and the append is caught by
        the next look, or by the next owner: the commit carries its epoch. ``table``: the
        segments of a reader leaving (out of the fetcher), not looked at: it could not report
        a loss, so the next owner checks."""
        if not positions:
            return {}
        fetcher = self._fetcher
        refused: dict[SegKey, tuple[int, int]] = {}
        if table is None:
            with self.gate.lock:
                looks = fetcher.looks(positions)
            logs = yield from call("fetcher.histories", [look.owned for look in looks])
            with self.gate.lock:
                limits = fetcher.commit_limits(looks, logs)
                if limits:
                    self.quiet_until = 0.0  # the reading thread looks at those logs next
                owned_now = fetcher.owned
                for key, (_, position) in positions.items():
                    limit = limits.get(key, position)
                    if key in owned_now:
                        limit = min(limit, owned_now[key].fetch)
                    if position > limit:
                        refused[key] = (position, limit)
                positions = {k: v for k, v in positions.items() if k not in refused}
                epochs = fetcher.epochs_of((k, p) for k, (_, p) in positions.items())
                lag = self._lag(positions, logs)
        else:
            epochs = fetcher.epochs_of(((k, p) for k, (_, p) in positions.items()), table)
            lag = NO_LAG  # leaving: its lag no longer matters
        if refused:
            logger.warning(
                "reader %r: commit of %s refused: their logs no longer hold those positions "
                "(a failover lost them)",
                self.reader_id,
                _refused_text(refused),
            )
        if not positions:
            return refused
        before = self.member.sync.revision
        try:
            yield from call("member.commit", positions, epochs, lag)
        except SegmentNotOwnedError:
            self.group_dirty = True  # ownership moved: reconcile on the next maintenance
            self.wake.set()
            raise
        if before == self._seen_revision and self.member.sync.revision == before + 1:
            self._seen_revision = before + 1  # only our own commit landed: nothing to act on
        with self.gate.lock:
            for key, (_, position) in positions.items():
                owned = self._fetcher.owned.get(key)
                if owned is not None:
                    owned.committed = max(owned.committed, position)
        return refused

    def _lag(
        self,
        positions: Mapping[SegKey, tuple[int, int]] | None = None,
        logs: Mapping[SegKey, tuple[int, list[tuple[int, int]]]] | None = None,
    ) -> int:
        """(Under the gate's lock.) This reader's lag (as it commits ``positions``): events
        between where it is in each owned segment and that segment's tail, as a commit's look
        at the logs (``logs``) found it, else as an earlier look did (at least what was
        fetched). Reported on commits and moves (see :mod:`readergroup.core.lag`); no command
        of its own."""
        owned_now, logs, positions = self._fetcher.owned, logs or {}, positions or {}
        self._tails = {
            key: logs[key][0] if key in logs else max(self._tails.get(key, 0), owned.fetch)
            for key, owned in owned_now.items()
        }
        at = {
            key: max(owned.consumed, positions[key][1] if key in positions else 0)
            for key, owned in owned_now.items()
        }
        return events_behind(at, self._tails)

    def send_rewinds(
        self, *, reported: bool = False, table: Mapping[SegKey, OwnedSegment] | None = None
    ) -> Steps[None]:
        """Move the group's positions back where the reading thread's fetcher found segments'
        logs diverged below them (reported lost there): a crash then resumes at the
        divergence. ``reported``: only where the loss was handed to the application (a reader
        leaving leaves the others to the next owner, whose check reports them); ``table``: the
        segments of a reader leaving (out of the fetcher)."""
        fetcher = self._fetcher
        rewinds: dict[SegKey, tuple[int, int, int]] = {}
        with self.gate.lock:
            if not fetcher.rewound:
                return
            owned_now = fetcher.owned if table is None else table
            keys = list(fetcher.rewound)
            fetcher.rewound.clear()
            for key in keys:
                owned = owned_now.get(key)
                if owned is None or owned.rewind is None:
                    continue
                if reported and owned.pending is not None:
                    continue
                position, epoch = owned.rewind
                if owned.committed > position:
                    rewinds[key] = (owned.token, position, epoch)
        if not rewinds:
            return
        try:
            yield from call("member.rewind", rewinds)
        except SegmentNotOwnedError:
            self.group_dirty = True  # ownership moved: the next owner checks the log itself
            self.wake.set()
            raise
        except RedisUnavailableError:
            with self.gate.lock:
                fetcher.rewound.update(rewinds)  # sent on a later round
            raise
        with self.gate.lock:
            for key, (token, position, epoch) in rewinds.items():
                owned = owned_now.get(key)
                if owned is not None and owned.token == token:
                    owned.committed = min(owned.committed, position)
                    if owned.rewind == (position, epoch):
                        owned.rewind = None

    def _rebalance(self) -> Steps[None]:
        state = yield from call("member.refresh")
        sync = self.member.sync
        looked_at, appended = sync.revision, sync.stats.appends
        if not self.member.is_member(state):
            raise ReaderNotInGroupError(
                f"reader {self.reader_id!r} was removed from the group (declared offline, or "
                "its session expired); create it again to rejoin"
            )
        if state.generation != self._group_generation:
            yield from self._reinitialize(state)
            state = self.member.state
        yield from self._take_checkpoints(state)
        self._hold_releases(state)
        with self.gate.lock:
            table = self._fetcher.owned
            going = {
                k: table[k] for k in self.machine.in_phase(SegmentPhase.RELEASABLE) if k in table
            }
            lag = self._lag()
        release_at = {k: self._release_position(o) for k, o in going.items()}
        epochs = self._fetcher.epochs_of(release_at.items(), going)
        try:
            # decided on the state just read: one read of the group log per wake-up
            acquired, released = yield from call(
                "member.rebalance",
                release_at,
                fetched_at=sync.revision,
                only_listed=True,
                release_epochs=epochs,
                lag=lag,
            )
        except BaseException:
            if going:  # the outcome is unknown: the next round adopts what is still ours
                self.group_dirty = True
                with self.gate.closed():
                    for key in going:
                        self._fetcher.remove(key)
                    self.machine.released(going)
            raise
        seen = sync.revision  # (before the check: the heartbeat thread may fetch meanwhile)
        if seen - looked_at != sync.stats.appends - appended:
            # others' changes came in meanwhile (a conflict's re-read, a move that landed
            # past them, the heartbeat's fetch): their wake-ups count as seen below, so look
            # at them (resets, checkpoints) at the next maintenance
            self.group_dirty = True
        state = self.member.state
        self._seen_revision = self._wake_seen = seen
        self.end_of_data = state.end_of_data
        yield from self._reconcile(
            state, released, going
        )  # adopts what was acquired, as owned in ``state``
        if acquired:
            logger.debug("reader %r acquired %s", self.reader_id, sorted(acquired))
        if (acquired or released) and self.reader_id in readers_to_move(state):
            # a move of its own gave it the next one (say its floor share, then the first
            # turn for the extra segment): its entry named it, but it has read past that
            # wake-up, so go again now (each round moves a segment: bounded)
            self.group_dirty = True
            self.wake.set()

    def _hold_releases(self, state: GroupState) -> None:
        """Stop handing out the segments the group wants back (as many as this reader is above
        its share in ``state``): from now on nothing more of them goes out. Which ones is this
        reader's choice: those already on their way out, then those of which nothing is with
        the application (released at once when no listener is to be told), then the newest.
        The others wait for the application's next read call (see
        :mod:`~readergroup.core.reader_machine`). Segments held for a release the state no
        longer asks for are handed out again."""
        me, machine = self.reader_id, self.machine
        if state.frozen_for(me) or machine.checkpoint_busy:
            return
        mine = state.owned_by(me)
        count = len(segments_to_release(state, me, len(mine) + 1))
        if not count and not any(
            p in (SegmentPhase.RELEASING, SegmentPhase.RELEASABLE)
            for p in list(machine.segments.values())  # (only this thread sends segments out)
        ):
            return  # nothing to give up, nothing on its way out: the gate stays open
        with self.gate.closed():
            table = self._fetcher.owned
            ready = [k for k in machine.in_phase(SegmentPhase.RELEASABLE) if k in mine]
            waiting = [k for k in machine.in_phase(SegmentPhase.RELEASING) if k in mine]
            extra = len(ready) + len(waiting) - count
            if extra > 0:
                for key in machine.keep(waiting[:extra]):
                    self._fetcher.serve(key)
                return
            candidates = [
                k
                for k, o in table.items()
                if machine.phase(k) is SegmentPhase.SERVING
                and k in mine
                and mine[k].token == o.token
            ]
            moved_past = {k for k in candidates if self._fetcher.moved_past(table[k])}
            candidates.sort(key=lambda k: (k not in moved_past, -mine[k].token))
            held, _ = machine.want_release(candidates[:-extra], moved_past=moved_past)
            for key in held:
                self._fetcher.hold(key)

    def _absorb_reset(self) -> Steps[bool]:
        """Re-initialize now if the group was reset since this reader last looked; whether it
        was."""
        state = yield from call("member.refresh")
        if state.generation != self._group_generation and self._group_generation >= 0:
            yield from self._reinitialize(state)
            return True
        return False

    def _reinitialize(self, state: GroupState) -> Steps[None]:
        """The group was reset (or this is the first look): start over from its state."""
        first = self._group_generation < 0
        self._group_generation = state.generation
        if not first:
            with self.gate.closed():
                dropped = self._fetcher.clear()
                self.machine.reset()  # the application hears of them at its next read call
            logger.info(
                "reader %r: the group was reset (generation %d); dropped %s",
                self.reader_id,
                state.generation,
                sorted(dropped),
            )
        if self.reader_id in state.reset_pending:
            yield from call("member.ack_reset", state.generation)

    def _take_checkpoints(self, state: GroupState) -> Steps[None]:
        """Queue (or, if silent, acknowledge at once) checkpoints that wait for this reader."""
        for checkpoint in state.checkpoints:
            name = checkpoint.name
            if checkpoint.done or self.reader_id not in checkpoint.pending:
                continue
            if name in self._handled_checkpoints:
                continue
            if checkpoint.silent:
                self._handled_checkpoints.add(name)
                with self.gate.lock:
                    positions = {k: o.consumed for k, o in self._fetcher.owned.items()}
                yield from call("member.ack_checkpoint", name, positions)
            else:
                with self.gate.lock:  # the reading thread hands it out next
                    if self.machine.checkpoint_seen(name):
                        self._handled_checkpoints.add(name)
                        self.quiet_until = 0.0

    def _reconcile(
        self,
        state: GroupState,
        released: list[SegKey],
        going: Mapping[SegKey, OwnedSegment],
    ) -> Steps[None]:
        """Drop local segments the group no longer gives this reader (released, taken away) and
        adopt the ones it gives and this reader does not hold yet (acquired, or handed back);
        segments ``going`` (sent for release) that were not released and are still this
        reader's stay (handed out again, or told to the listeners again)."""
        mine = state.owned_by(self.reader_id)
        with self.gate.lock:
            held = set(self._fetcher.owned)
        new = []
        for key, assignment in mine.items():
            if key not in held or key in released:
                new.append((yield from self._prepare(key, assignment)))
        machine = self.machine
        with self.gate.closed():
            owned_now = self._fetcher.owned
            for key in released:
                if key in owned_now and owned_now[key] is going.get(key):
                    self._fetcher.remove(key)
            machine.released(released)
            kept = [k for k in going if k not in released and k in owned_now]
            lost = [k for k, o in owned_now.items() if k not in mine or mine[k].token != o.token]
            for key in lost:
                self._fetcher.remove(key)
            machine.lose(lost)
            for key in machine.keep(k for k in kept if k not in lost):
                self._fetcher.serve(key)
            fresh = [o for o in new if o.key not in owned_now]
            serving = set(machine.adopt(o.key for o in fresh))
            for owned in fresh:
                self._fetcher.add(owned, serving=owned.key in serving)
            if machine.needs_reader:
                self.quiet_until = 0.0
        if lost:
            logger.debug("reader %r lost %s", self.reader_id, sorted(lost))

    def _prepare(self, key: SegKey, assignment: Assignment) -> Steps[OwnedSegment]:
        """A segment to adopt, with its stream's limits (read now, outside any lock)."""
        scope, stream = split_scoped_stream(key[0], None)
        data_key = self._connection.keys.segment(scope, stream, key[1]).events
        owned = OwnedSegment.at(key, scope, stream, data_key, assignment.token, assignment.position)
        owned.epoch = self.member.state.epochs.get(key, -1)
        end = self.member.state.end
        if end is not None:
            owned.final_tail, owned.bounded = end.get(key, assignment.position), True
        stream_state: StreamState = (yield from self._stream_sync(key[0])).state
        owned.max_event_size = stream_state.config.max_event_size
        return owned

    def _stream_sync(self, scoped: str) -> Steps[Any]:
        """The synchronizer of the metadata of stream ``scoped``, opened (and followed) at its
        first use."""
        sync = self._streams.get(scoped)
        if sync is None:
            scope, stream = split_scoped_stream(scoped, None)
            sync = self._connection.synchronizer(
                stream_sync_name(scope, stream), UPDATE_TYPES, STATE_TYPES
            )
            yield from call("follow", sync)
            with self.gate.lock:  # the reading thread's fetch lists the streams' logs
                self._streams[scoped] = sync
        return sync

    def _complete_finished(self, *, follow: bool = True) -> Steps[None]:
        """Complete owned segments that are sealed (or at a bounded end) and consumed, all in
        one group update (``follow``: read the streams' metadata logs first; else no news woke
        the reader and the local copies are current)."""
        if self.member.state.frozen_for(self.reader_id):
            return  # a checkpoint or reset awaits this reader: move nothing until then
        finished: list[OwnedSegment] = []
        successors: dict[SegKey, tuple[tuple[SegKey, ...], int]] = {}
        for scoped, sync in list(self._streams.items()):
            if follow:
                yield from call("follow", sync)
            state: StreamState = sync.state
            ended = []
            with self.gate.lock:
                phase = self.machine.phase
                mine = [
                    o
                    for o in self._fetcher.owned.values()
                    if o.key[0] == scoped and phase(o.key) is SegmentPhase.SERVING
                ]
            for owned in mine:
                record = state.segments.get(owned.segment)
                if record is None or (record.active and not owned.bounded):
                    continue
                if record.truncated:
                    yield from self._truncated_away(owned)
                ended.append((owned, record))
            yield from self._learn_final_tails(
                [o for o, r in ended if o.final_tail < 0 and not r.truncated]
            )
            for owned, record in ended:
                with self.gate.lock:
                    done = (
                        owned.consumed >= owned.final_tail
                        and not owned.buffer
                        and not owned.pending
                        # manual mode: completing commits the end, which only commit() does
                        and (self._group.commit_mode == AUTO or owned.committed >= owned.final_tail)
                    )
                if done:
                    finished.append(owned)
                    for succ in record.successors:
                        if (scoped, succ) not in successors:  # a merge's: once, not per segment
                            predecessors = state.segments[succ].predecessors
                            successors[(scoped, succ)] = (
                                tuple((scoped, p) for p in predecessors),
                                state.head.get(succ, 0),
                            )
        if not finished:
            return
        completions = [(o.key, o.token, o.final_tail) for o in finished]
        handed = [(succ, preds, start) for succ, (preds, start) in successors.items()]
        if not (yield from call("member.complete_segments", completions, handed)):
            return  # a checkpoint or reset arrived: complete after it
        with self.gate.closed():
            completed = [o.key for o in finished if self._fetcher.owned.get(o.key) is o]
            for key in completed:
                self._fetcher.remove(key)
            self.machine.complete(completed)
        self.group_dirty = True

    def _learn_final_tails(self, owned: Sequence[OwnedSegment]) -> Steps[None]:
        """Set the final tail of each of ``owned`` (sealed in the stream's metadata), reading
        their states in one round trip; finish the seal of any an interrupted scale left open."""
        by_stream: dict[tuple[str, str], list[OwnedSegment]] = {}
        for segment in owned:
            by_stream.setdefault((segment.scope, segment.stream), []).append(segment)
        for (scope, stream), segments in by_stream.items():
            ids = [o.segment for o in segments]
            states = yield from call("segments.segment_states", scope, stream, ids)
            tails = {s: state.tail for s, state in states.items() if state.sealed}
            unsealed = [s for s in ids if s not in tails]
            if unsealed:  # an interrupted scale: finish its seals
                logger.info(
                    "reader %r: finishing the seal of %s",
                    self.reader_id,
                    segments_text([(f"{scope}/{stream}", s) for s in unsealed]),
                )
                tails.update((yield from call("segments.seal_segments", scope, stream, unsealed)))
            with self.gate.lock:
                for segment in segments:
                    segment.final_tail = tails[segment.segment]

    def _truncated_away(self, owned: OwnedSegment) -> Steps[None]:
        """The segment is wholly behind the stream's head: its data is (being) deleted. Hand out
        what is buffered, report the loss of anything after it once, then complete it (its
        successors become readable from the head)."""
        tail = owned.final_tail
        if tail < 0:
            seg = yield from call(
                "segments.segment_states", owned.scope, owned.stream, [owned.segment]
            )
            if seg[owned.segment].exists and seg[owned.segment].sealed:
                tail = seg[owned.segment].tail
        with self.gate.lock:
            owned.final_tail = max(owned.final_tail, tail)
            if owned.final_tail < 0 or owned.fetch < owned.final_tail:
                owned.hold(TruncatedDataError(owned.name, owned.fetch, -1), owned.fetch)
                owned.final_tail = owned.fetch  # nothing more can be fetched

    def _notify(self, released: Sequence[SegKey] = (), lost: Sequence[SegKey] = ()) -> Steps[None]:
        """Tell every listener (lost, then released); every listener hears every change even
        if one raises; the first exception is raised at the end. (An asyncio reader's listener
        may be a coroutine function: its driver awaits what ``invoke`` returns.)"""
        telling = Telling(listener_calls(self.listeners, lost, released))
        yield from tell_steps(telling, self.reader_id)
        if telling.failure is not None:
            raise telling.failure

    # -- checkpoints -------------------------------------------------------------------------
    def _acknowledge_checkpoint(self, *, leaving: bool = False) -> Steps[None]:
        """Report the positions a checkpoint was handed out at, once the application moved
        past it (``leaving``: or now, as the next read would)."""
        if leaving:
            with self.gate.lock:
                self.machine.leaving()
        due = self.machine.ack_due
        if due is not None:
            name, positions = due
            try:
                yield from call("member.ack_checkpoint", name, positions)
            except RedisUnavailableError:
                raise  # acknowledged on a later round
            except BaseException:
                with self.gate.lock:
                    self.machine.acknowledged()
                raise
            with self.gate.lock:
                self.machine.acknowledged()
            self.group_dirty = True

    # -- the state logs a fetch also waits on ------------------------------------------------
    def longest_block(self) -> float:
        """How long one fetch may block: every change this reader must act on wakes it, so up
        to ``heartbeat_interval`` (at least ``group_refresh_time``); but only
        ``group_refresh_time`` while an owned segment's end is known, as reaching that end
        is checked between fetches."""
        config = self._group
        if any(o.final_tail >= 0 for o in self._fetcher.owned.values()):
            return config.group_refresh_time
        return max(config.group_refresh_time, config.heartbeat_interval)

    def parked_hold(self, hold: float) -> float:
        """How long a fetch's ``XREAD`` may block on the server when the call waits ``hold``
        at most (see :meth:`~readergroup.client.fetch_core.FetchCore.plan_fetch`): ``hold``
        (the asyncio session's may outlive it)."""
        return hold

    def wake_logs(self) -> dict[str, str]:
        """Key -> entry id after which news should wake a blocked fetch: the group log's wake
        streams (the shared one and this reader's own), and the metadata log of every stream
        read."""
        logs: dict[str, str] = {}
        group = self.member.sync.name
        synchronizers = [(group, max(self._seen_revision, self._wake_seen))]
        synchronizers += [(sync.name, sync.revision) for sync in self._streams.values()]
        woken_to = self._woken_to
        for name, revision in synchronizers:
            after_revision = max(revision, self._stuck_at.get(name, 0), woken_to.get(name, -1))
            waits = [self._connection.wake_on(name, after_revision, wakes_only=name == group)]
            if name == group:
                waits.append(
                    self._connection.follower_wake_on(name, after_revision, self.reader_id)
                )
            for log, after in waits:
                self._log_names[log] = name
                if log not in self._bad_logs:
                    logs[log] = after
        return logs

    def absorb(self, outcome: FetchOutcome) -> None:
        """Mark what a fetch found in the state logs as due for maintenance."""
        if outcome.watched:
            self._watched_at = self._clock.monotonic()
        if outcome.bad_logs:
            self._bad_logs |= outcome.bad_logs
            self.group_dirty = self._streams_dirty = True
        newest = {log: max(map(wake_revision, e)) for log, e in outcome.news.items() if e}
        for log, revision in newest.items():
            name = self._log_names.get(log)
            if name is not None:
                self._woken_to[name] = max(revision, self._woken_to.get(name, -1))
        woken = False
        for log in outcome.woken:
            if log not in self._group_logs:
                self._streams_dirty = woken = True
                continue
            # a move wakes only the readers with a move to make then (Update.wakes, on their
            # own wake streams; an old writer's may name them on the shared one): the others
            # skip it, and wait for the wake-ups after it; so does a reader whose maintenance
            # thread has refreshed past it meanwhile (it acted on that state: wake-ups coming
            # one by one make one round, not one each)
            wakes = outcome.news.get(log)
            if not wakes or (
                newest[log] > self._seen_revision and wakes_follower(wakes, self.reader_id)
            ):
                self.group_dirty = woken = True
            else:
                self._wake_seen = max(self._wake_seen, newest[log])
        if outcome.bad_logs or woken or self._fetcher.rewound:
            self.wake.set()  # (a rewind found by the fetch: the group's position moves back)

    def _note_bad_entry(self, exc: CoordinationError) -> None:
        cause = exc.__cause__
        if isinstance(cause, BadEntryError):
            self._stuck_at[cause.name] = cause.revision

    # -- a deleted group ---------------------------------------------------------------------
    def _group_deleted(self, error: ReaderGroupError) -> Steps[bool]:
        """Whether ``error`` came from the group's state having been deleted (a deleted stream's
        metadata also reads as a missing synchronizer: the group's own log is checked)."""
        if not isinstance(error.__cause__, SynchronizerNotFoundError):
            return False
        try:
            group = self._connection.synchronizer(
                self.member.sync.name, GROUP_UPDATE_TYPES, GROUP_STATE_TYPES
            )
            with translate_errors("read group"):
                yield from call("fetch_updates", group)
        except ReaderGroupError as exc:
            return isinstance(exc.__cause__, SynchronizerNotFoundError)
        return False

    def _on_group_deleted(self) -> Steps[None]:
        """Stop for good: fenced, heartbeats stopped, and its heartbeat row removed (a beat may
        have recreated the hash after the deletion)."""
        if not self.gone:
            logger.warning("reader %s: its group was deleted", self.reader_id)
        self.gone = True
        self.stop.set()
        self.fence(str(self.group_gone()))  # zeroes quiet_until
        try:
            yield from call("member.heartbeats.forget", self.reader_id, self.member.generation)
        except ReaderGroupError as exc:
            logger.warning(
                "reader %s: could not remove its heartbeat", self.reader_id, exc_info=exc
            )

    # -- leaving and rejoining ---------------------------------------------------------------
    def close_steps(self, *, leave: bool = True) -> Steps[None]:
        """Graceful leave, or (``leave=False``) a static leave (see
        :meth:`EventStreamReader.close`)."""
        if self.closed:
            return
        self.closed = True
        self.quiet_until = 0.0
        self.stop.set()
        yield from call("stop_background", 10.0)
        yield from call("group_lock.acquire")
        try:
            self._closing = True  # a listener may commit(): the segments are still owned
            try:
                if self.telling is not None:  # what a cancelled read call left to tell
                    yield from self._tell_listeners(quietly=True)
            finally:
                self._closing = False
            with self.gate.closed():  # nothing is handed out from here on
                removed = self.machine.removed
                step = self.machine.read_call()  # (closed: what the application is yet to hear)
                heard = set(self.machine.in_phase(SegmentPhase.RELEASABLE))  # told released
                owned_keys = self.machine.close()
                for key in owned_keys:
                    self._fetcher.hold(key)
            self._closing = True
            try:
                if removed is None:
                    to_tell = [key for key in owned_keys if key not in heard]
                    yield from self._notify_quietly(step.lost, (*step.completed, *to_tell))
                else:
                    yield from self._notify_quietly((*step.lost, *owned_keys), step.completed)
            finally:
                self._closing = False
            with self.gate.closed():
                owned_now = dict(self._fetcher.owned)
                self._fetcher.clear()
            if removed is None:
                yield from self._leave(owned_now, stay=not leave)
        finally:
            self.group_lock.release()

    def _notify_quietly(self, lost: Sequence[SegKey], released: Sequence[SegKey]) -> Steps[None]:
        """Tell the listeners as a reader closes (a listener's exception is logged: the
        reader leaves all the same)."""
        try:
            yield from self._notify(released=released, lost=lost)
        except Exception as exc:
            logger.warning(
                "reader %r: a rebalance listener raised while closing", self.reader_id, exc_info=exc
            )

    def _leave(self, owned_now: dict[SegKey, OwnedSegment], *, stay: bool = False) -> Steps[None]:
        """Acknowledge a checkpoint handed out, move positions back where losses were
        reported, commit what was consumed (auto mode), then give the segments back; or
        (``stay``, a static leave) keep them: they wait for a restart under this id (which
        takes them over at once) or for the session to expire."""
        for owned in owned_now.values():
            owned.consumed = owned.returned
        try:
            with translate_errors("leave"):
                yield from self._acknowledge_checkpoint(leaving=True)
                if (yield from self._absorb_reset()):
                    owned_now = {}  # the group was reset: nothing of the old generation
                yield from self.send_rewinds(reported=True, table=owned_now)
                if self._group.commit_mode == AUTO:  # manual mode commits only on commit()
                    yield from self._commit(self._auto_positions(owned_now), table=owned_now)
                if stay:
                    logger.info(
                        "reader %r closed keeping its segments for a restart within the session",
                        self.reader_id,
                    )
                    return
                at = {k: self._release_position(o) for k, o in owned_now.items()}
                yield from call("member.leave", at, self._fetcher.epochs_of(at.items(), owned_now))
            logger.debug("reader %r left its group", self.reader_id)
        except ReaderGroupError as exc:
            logger.warning(
                "reader %r: could not %s; %s at the committed positions",
                self.reader_id,
                "commit as it closed" if stay else "leave its group",
                "a restart under its id resumes"
                if stay
                else "its session will expire and others take over",
                exc_info=exc,
            )

    def rejoin_steps(self, stop: Signal | None = None) -> Steps[int]:
        """See :meth:`EventStreamReader.rejoin`."""
        failures = 0
        while not self.closed and not (stop is not None and stop.is_set()):
            if self.fenced is None:
                return int(self.member.generation)
            try:
                return (yield from self._rejoin_once())
            except (RedisUnavailableError, ReaderAlreadyOnlineError) as exc:
                failures += 1
                delay = self._rng.uniform(0, min(REJOIN_MAX_DELAY, 0.05 * 2 ** min(failures, 8)))
                logger.warning(
                    "reader %r: rejoin failed, retrying in %.2fs",
                    self.reader_id,
                    delay,
                    exc_info=exc,
                )
                yield from call("backoff", delay)
        return -1

    def _rejoin_once(self) -> Steps[int]:
        self.stop.set()  # the fenced threads must be gone before a new generation
        gone = yield from call("stop_background", self._connection.config.socket_timeout + 1)
        if not gone:
            raise RedisUnavailableError(
                f"reader {self.reader_id!r}: the previous heartbeat or maintenance is still "
                "waiting on Redis"
            )
        yield from call("group_lock.acquire")
        try:
            with translate_errors("rejoin"):
                generation: int = yield from call("member.join")
            now = self._clock.monotonic()
            with self.gate.closed():
                self.machine.rejoined()
                self._outage.error = None
                self._fetcher.clear()
                self.group_dirty = self._streams_dirty = True
                self.quiet_until = 0.0
                self._seen_revision = self._wake_seen = -1
                self._woken_to.clear()
                self._last_beat_ok = self.last_poll = self._last_refresh = self._last_commit = now
                self.stop.clear()
                self.wake.clear()
        finally:
            self.group_lock.release()
        yield from call("start_background")  # the heartbeats; maintenance at the next read
        logger.info("reader %r rejoined its group as generation %d", self.reader_id, generation)
        return generation

    # -- the heartbeat thread ----------------------------------------------------------------
    def heartbeat_loop_steps(self) -> Steps[None]:
        """H's loop: a round, then a wait (cut short by ``stop``), until a round ends it."""
        stop = self.stop
        while not stop.is_set():
            wait = yield from self.heartbeat_steps()
            if wait is None:
                return
            yield from call("stopped_within", wait)

    def heartbeat_steps(self) -> Steps[float | None]:
        """One heartbeat round: renew, notice a removal, an expired poll interval or a deleted
        group; how long to wait before the next (``None``: the heartbeats end)."""
        interval = self._group.heartbeat_interval
        sent = self._clock.monotonic()
        wait = interval
        try:
            with translate_errors("heartbeat"):
                liveness = yield from call("member.heartbeat")
            if liveness.member:
                self._last_beat_ok = sent
            elif self.fenced is None:
                self._removed(
                    f"reader {self.reader_id!r} was removed from the group (its session "
                    "expired, or reader_offline was called); create it again to rejoin"
                )
            if liveness.removed:
                logger.debug(
                    "reader %r removed expired members %s", self.reader_id, liveness.removed
                )
                self.group_dirty = True
                self.wake.set()
            if liveness.next_expiry_ms is not None:
                until = (liveness.next_expiry_ms - liveness.now_ms) / 1000
                wait = max(0.05, min(interval, until))
            if self._beat_failed:
                logger.info("reader %r: heartbeat renewed again", self.reader_id)
            self._beat_failed = False
        except ReaderGroupError as exc:
            if (yield from self._group_deleted(exc)):
                yield from self._on_group_deleted()
                return None
            if not self._beat_failed:
                logger.warning(
                    "reader %r: heartbeat failed, retrying", self.reader_id, exc_info=exc
                )
            self._beat_failed = True
            wait = min(interval, 0.5)
        if self.fenced is None and sent - self.last_poll > self._group.max_poll_interval:
            self._removed(
                f"reader {self.reader_id!r} did not call read_next_event for "
                f"max_poll_interval={self._group.max_poll_interval}s; its segments were "
                "given back at their committed positions"
            )
            yield from self._leave_quietly()
            return None
        if self.fenced is not None:
            yield from self._leave_quietly()
            return None
        return wait

    def _leave_quietly(self) -> Steps[None]:
        try:
            with translate_errors("leave"):
                yield from call("member.leave")
        except ReaderGroupError as exc:
            logger.warning(
                "reader %r: could not leave after being fenced; its session expires instead",
                self.reader_id,
                exc_info=exc,
            )

    # -- I/O both drivers perform alike (an asyncio driver awaits what these return) -----------
    @staticmethod
    def follow(sync: Any) -> Any:
        return sync.follow()

    @staticmethod
    def fetch_updates(sync: Any) -> Any:
        return sync.fetch_updates()

    @staticmethod
    def invoke(function: Callable[..., Any], *args: Any) -> Any:
        """Call a rebalance listener (an asyncio driver awaits a coroutine it returns)."""
        return function(*args)

    # -- a read call (the reading thread) ----------------------------------------------------
    def serve_steps(
        self, max_events: int, timeout: float, now: float, *, fetched: bool = False
    ) -> Steps[list[EventRead[T]]]:
        """A read call's slow path (under the gate's lock, let go while a fetch waits): a
        checkpoint due, errors, buffered events, or what one fetch brings (always at least
        one fetch, even past ``timeout``, when nothing is buffered; ``fetched``: the call
        waited on a fetch already, see :meth:`AsyncGroupSession.serve
        <readergroup.aio.session.AsyncGroupSession.serve>`). No group round trip: the
        maintenance thread makes those."""
        fetcher = self._fetcher
        if self.closed:
            raise ReaderClosedError(f"reader {self.reader_id!r} is closed")
        self.check_lease()
        self.last_poll = now
        fetcher.consume_returned()  # the application moved past every event handed out
        self.consumed_recorded()
        deadline = now + max(0.0, timeout)
        while True:
            # what the reader's machine says comes first: listeners, a removal, a checkpoint
            # (again before each fetch: nothing was handed out since the call began)
            checkpoint = yield from self.begin_read_steps()
            if checkpoint is not None:
                return [checkpoint]
            if fetcher.errors:
                raise fetcher.errors.popleft()
            events: list[EventRead[T]] = yield from call("take_refilled", max_events)
            if events:
                return events
            if self.end_of_data:
                return []
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0 and fetched:
                return []
            hold = self.longest_block()
            if self.maintenance_under_way():  # poll: its outcome may be segments to read
                hold = min(hold, MAINTENANCE_POLL)
            block = max(0.0, min(remaining, hold))
            self.absorb((yield from call("fetch", block, self.wake_logs(), self.parked_hold(hold))))
            fetched = True
            self.check_lease()


class GroupSession(SessionSteps[T]):
    """One reader's life in its group, keeping ``fetcher``'s segments those the group gives:
    :class:`SessionSteps` driven by the reading thread, a maintenance thread and a heartbeat
    thread (see :mod:`~readergroup.client.maintenance`)."""

    gate: HandOutGate
    wake: threading.Event
    stop: threading.Event

    def __init__(
        self,
        connection: Connection,
        member: GroupMember,
        group_config: ReaderGroupConfig,
        fetcher: Fetcher[T],
        outage: Outage,
        *,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self._fetcher_threaded = fetcher
        self._group_lock = threading.RLock()
        self._maintenance: threading.Thread | None = None
        super().__init__(
            connection,
            member,
            group_config,
            fetcher,
            outage,
            clock=clock,
            rng=rng,
            gate=HandOutGate(self._shut),
            wake=threading.Event(),
            stop=threading.Event(),
        )
        self.segments = connection.segments
        self._heartbeat_thread = self._start_heartbeats()

    @property
    def group_lock(self) -> threading.RLock:
        return self._group_lock

    # -- the steps' I/O, blocking ------------------------------------------------------------
    def fetch(self, block: float, logs: Mapping[str, str], hold: float) -> FetchOutcome:
        return self._fetcher_threaded.fetch(block, logs, hold=hold)

    def take_refilled(self, max_events: int) -> list[EventRead[T]]:
        return self._fetcher_threaded.take(max_events, refill=True)

    def backoff(self, seconds: float) -> None:
        self._clock.sleep(seconds)

    def wait_wake(self, timeout: float) -> bool:
        return self.wake.wait(timeout)

    def stopped_within(self, timeout: float) -> bool:
        return self.stop.wait(timeout)

    def stop_background(self, timeout: float) -> bool:
        """Stop the heartbeat and maintenance threads (``stop`` is set); whether both are
        gone."""
        self._heartbeat_thread.join(timeout)
        gone = self._stop_maintenance(timeout)
        return gone and not self._heartbeat_thread.is_alive()

    def start_background(self) -> None:
        self._maintenance = None  # started again by the next read call
        self._heartbeat_thread = self._start_heartbeats()

    # -- the threaded API --------------------------------------------------------------------
    def begin_read(self) -> EventRead[T] | None:
        return drive(self.begin_read_steps(), self)

    def serve(self, max_events: int, timeout: float, now: float) -> list[EventRead[T]]:
        return drive(self.serve_steps(max_events, timeout, now), self)

    def maintain(self) -> bool:
        return drive(self.maintain_steps(), self)

    def commit(self, positions: Mapping[SegKey, int] | None) -> None:
        drive(self.commit_steps(positions), self)

    def close(self, *, leave: bool = True) -> None:
        drive(self.close_steps(leave=leave), self)

    def rejoin(self, stop: threading.Event | None = None) -> int:
        return drive(self.rejoin_steps(stop), self)

    # -- maintenance thread ------------------------------------------------------------------
    def start_maintenance(self) -> None:
        """Start the maintenance thread, once (reading thread: its first read call)."""
        if self._maintenance is None and not self.closed and self.fenced is None:
            self._maintenance = threading.Thread(
                target=drive,
                args=(maintenance_steps(self, self.wake, self.stop, self._rng), self),
                name=f"rg-maintenance-{self.reader_id}",
                daemon=True,
            )
            self._maintenance.start()

    def _stop_maintenance(self, timeout: float) -> bool:
        """Stop the maintenance thread (``stop`` is set); whether it is gone."""
        self.wake.set()
        thread = self._maintenance
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def background_alive(self) -> bool:
        thread = self._maintenance
        return thread is not None and thread.is_alive()

    # -- heartbeat thread --------------------------------------------------------------------
    def _start_heartbeats(self) -> threading.Thread:
        thread = threading.Thread(
            target=drive,
            args=(self.heartbeat_loop_steps(), self),
            name=f"rg-heartbeat-{self.reader_id}",
            daemon=True,
        )
        thread.start()
        return thread


def _refused_text(refused: Mapping[SegKey, tuple[int, int]]) -> str:
    return ", ".join(
        f"{stream}/{segment} at {position} (its log diverged at {end})"
        for (stream, segment), (position, end) in sorted(refused.items())
    )
