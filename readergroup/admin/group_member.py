"""One reader's membership in a group: join, heartbeat, liveness, balance, commit, complete.

The protocol shell between the pure plans (:mod:`~readergroup.core.membership`, over
:mod:`~readergroup.core.group_state` and :mod:`~readergroup.core.balance`) and storage. It
depends only on a state synchronizer and a
:class:`~readergroup.core.membership.HeartbeatStore`, so the same code runs against Redis in
production and against :class:`~statesync.MemoryLogBackend` plus
:class:`~readergroup.testing.memory_heartbeats.MemoryHeartbeatStore` in the deterministic
simulation.

Who may call what: one :class:`GroupMember` per reader; its owner's threads may call any
method (the synchronizer serializes them).

A lossy failover of the group's log: every method that meets
:class:`~statesync.LogRegressedError` (the log lost entries this member had applied) adopts
the log's state, rejoins if the log lost this member's join (its own live heartbeat does not
hold the rejoin back), and runs once more on the adopted state.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

from readergroup.core.balance import (
    expired_readers,
    next_expiry_ms,
)
from readergroup.core.calls import Steps, blocking, call
from readergroup.core.errors import ReaderGroupError, ReaderNotInGroupError
from readergroup.core.group_state import NO_LAG, Assignment, GroupState, ReaderRecord, SegKey
from readergroup.core.liveness import ExpiryGuard
from readergroup.core.log_format import NEWEST_FORMAT
from readergroup.core.membership import (
    HeartbeatStore,
    plan_ack_checkpoint,
    plan_ack_reset,
    plan_acquire,
    plan_commit,
    plan_complete,
    plan_join,
    plan_release,
    plan_remove,
    plan_rewind,
)
from readergroup.storage.format_negotiation import NegotiatedFormat
from readergroup.storage.translate import translate_errors
from statesync import LogRegressedError, StateSynchronizer

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_LISTED = 8
"""Segments named in one log record; more are counted (a reader may own thousands)."""


def segments_text(segments: Collection[SegKey]) -> str:
    """How many segments, and ``scope/stream/segment`` of the first few, for a log record.

    >>> segments_text([("s/orders", 1), ("s/orders", 0)])
    '2 segments (s/orders/0, s/orders/1)'
    >>> segments_text([("s/o", n) for n in range(10)])
    '10 segments (s/o/0, s/o/1, s/o/2, s/o/3, s/o/4, s/o/5, s/o/6, s/o/7, ...)'
    >>> segments_text([])
    'no segments'
    """
    if not segments:
        return "no segments"
    ordered = sorted(segments)
    names = [f"{stream}/{segment}" for stream, segment in ordered[:_LISTED]]
    more = ", ..." if len(ordered) > _LISTED else ""
    plural = "s" if len(ordered) != 1 else ""
    return f"{len(ordered)} segment{plural} ({', '.join(names)}{more})"


def _recovers(
    method: Callable[Concatenate[MemberSteps, P], Steps[R]],
) -> Callable[Concatenate[MemberSteps, P], Steps[R]]:
    """Run ``method``'s steps; after a regressed log, recover (see the module doc) and run them
    again."""

    @functools.wraps(method)
    def run(member: MemberSteps, /, *args: P.args, **kwargs: P.kwargs) -> Steps[R]:
        try:
            return (yield from method(member, *args, **kwargs))
        except LogRegressedError as exc:
            yield from member.recover_steps(exc)
            return (yield from method(member, *args, **kwargs))
        except ReaderNotInGroupError:
            if not member.member_after_recovery():
                raise
            return (yield from method(member, *args, **kwargs))

    return run


@dataclass(frozen=True, slots=True)
class Liveness:
    """What a heartbeat learned: server time, who was removed, when to look again."""

    now_ms: int
    removed: tuple[str, ...]
    next_expiry_ms: int | None
    member: bool


class MemberSteps:
    """A reader's actions on the group state, as call steps (:mod:`readergroup.core.calls`) on
    ``sync`` and ``heartbeats``: every decision of a member, written once, run by the threaded
    :class:`GroupMember` and the asyncio
    :class:`~readergroup.admin.aio_group_member.AsyncGroupMember`. All changes are conditional
    appends. ``log_format``: the group log's format as the synchronizer negotiates it (default:
    :class:`NegotiatedFormat` on ``heartbeats``)."""

    def __init__(
        self,
        sync: Any,
        heartbeats: Any,
        reader_id: str,
        *,
        session_timeout_ms: int,
        max_moves: int,
        judge_every_ms: int | None = None,
        log_format: Callable[[GroupState], int] | None = None,
    ) -> None:
        self.sync = sync
        self.heartbeats = heartbeats
        self.reader_id = reader_id
        self.generation = 0
        self.server_ms = 0
        """Server time seen by the latest heartbeat (stamps acquisitions)."""
        self._session_timeout_ms = session_timeout_ms
        self._judge_every_ms = judge_every_ms or max(1, session_timeout_ms // 10)
        """Least ms between two judgements of the group's sessions (by whichever member's
        heartbeat finds it due): the heartbeat interval."""
        self._refreshed_ms = 0
        """Server time of the heartbeat's latest read of the group log."""
        self._max_moves = max_moves
        self._log_format = log_format or NegotiatedFormat(heartbeats)
        """The group log's format as the synchronizer negotiates it: a commit reports its lag
        only in the newest (a previous version refuses a field it does not know)."""
        self._newest_for: object = None
        """The members map a commit last found writing the newest format: a move reports its
        lag only while the members are still those (it reads no announcements itself: a join
        storm made every reader's every round read them)."""
        self._joined = False
        self._recovery = threading.RLock()
        self._expiry = ExpiryGuard(session_timeout_ms)

    @property
    def state(self) -> GroupState:
        state: GroupState = self.sync.state
        return state

    def recover_steps(self, cause: LogRegressedError) -> Steps[None]:
        """Adopt the group log's state after ``cause``; rejoin if the log lost our join."""
        with self._recovery:
            logger.warning(
                "reader %r: the group log lost writes it had applied; adopting the log",
                self.reader_id,
                exc_info=cause,
            )
            yield from call("sync.resync")
            if self._joined and not self.is_member():
                yield from self._join(replace_own=True)
                logger.info(
                    "reader %r rejoined the group as generation %d after the log regressed",
                    self.reader_id,
                    self.generation,
                )

    def member_after_recovery(self) -> bool:
        """Whether this reader is a member once any recovery under way in another thread is
        over (between its resync and its rejoin the state does not list this reader)."""
        with self._recovery:
            return self._joined and self.is_member()

    @_recovers
    def refresh_steps(self) -> Steps[GroupState]:
        yield from call("sync.fetch_updates")
        return self.state

    def is_member(self, state: GroupState | None = None) -> bool:
        state = state or self.state
        record = state.readers.get(self.reader_id)
        return record is not None and record.generation == self.generation

    def join_steps(self, *, takeover: bool = False) -> Steps[int]:
        """Become an online member; return the new generation.

        A previous incarnation with this id is replaced, in the same conditional update, when
        it stopped beating, when ``takeover`` (static membership: a restart under the same
        id), or when it is this member's own earlier generation (a rejoin after being
        fenced): that fences its generation (its commits and moves fail from then on) and
        its segments go to the new generation at their committed positions, so nobody else
        moves. Without ``takeover`` a live other incarnation is refused
        (ReaderAlreadyOnlineError); a newer one than this member's own raises
        ReaderReplacedError (another process took the id over: this one stops).
        """
        own = self.generation if self._joined else None
        try:
            return (yield from self._join(replace_own=takeover, own_generation=own))
        except LogRegressedError:
            yield from call("sync.resync")
            return (yield from self._join(replace_own=takeover, own_generation=own))

    def _join(self, *, replace_own: bool, own_generation: int | None = None) -> Steps[int]:
        """Join; ``replace_own``: a record under this id is replaced whatever its heartbeat
        says; ``own_generation``: this member's earlier generation (see :meth:`join_steps`)."""
        now, beats = yield from call("heartbeats.beat", "", 0)
        self.server_ms = now
        me = self.reader_id
        yield from call("sync.fetch_updates")
        before = self.state.readers.get(me)
        taken = sorted(self.state.owned_by(me)) if before is not None else []
        yield from call(
            "sync.update_state",
            plan_join(
                me,
                beats,
                now,
                self._session_timeout_ms,
                replace_own=replace_own,
                own_generation=own_generation,
            ),
        )
        record = self.state.readers[me]
        self.generation = record.generation
        self._joined = True
        if before is not None:
            logger.info(
                "reader %r replaced its incarnation of generation %d, taking over %s",
                me,
                before.generation,
                segments_text(taken) or "no segments",
            )
        # the join was decided on fresh state, so whatever heartbeat is stored under this id is
        # stale (even of a higher generation, should a regressed log have reused numbers)
        yield from call("heartbeats.beat", me, self.generation, claim=True)
        logger.info("reader %r joined %s as generation %d", me, self.sync.name, self.generation)
        yield from self._announce_format(record)
        return self.generation

    def _announce_format(self, record: ReaderRecord) -> Steps[None]:
        """Announce the newest log format this version reads (see
        :mod:`~readergroup.core.log_format`); until it is, the group keeps writing the older
        format, which this version reads too."""
        try:
            yield from call("heartbeats.announce", record, NEWEST_FORMAT)
        except ReaderGroupError as exc:
            logger.warning(
                "reader %r could not announce its log format; the group's log stays in the "
                "older format while it is a member: %s",
                self.reader_id,
                exc,
                exc_info=exc,
            )

    @_recovers
    def heartbeat_steps(self, *, judge: bool = False) -> Steps[Liveness]:
        """Renew this reader's heartbeat; when it is this member's turn (or ``judge``), remove
        members whose session expired (none while the heartbeats cannot be trusted: see
        :mod:`~readergroup.core.liveness`).

        O(1) on most beats: the store returns this reader's own entry only, and every heartbeat
        to one member per ``judge_every_ms`` (the heartbeat interval); the group log is read
        only by that member, when this reader's own entry was missing or taken by another
        generation (it may have been removed), and once a session as a safety net (the
        reading thread reads it on every wake-up)."""
        me = self.reader_id
        renewal = yield from call(
            "heartbeats.renew",
            me,
            self.generation,
            session_ms=self._session_timeout_ms,
            judge_every_ms=self._judge_every_ms,
            judge=judge,
        )
        now, beats = renewal.now_ms, renewal.beats
        self.server_ms = now
        grace_before = self._expiry.grace_until_ms
        own_lost = self._expiry.lost(self.generation, renewal.before)
        may_judge = self._expiry.observe(me, now, beats, own_lost=own_lost)
        if not may_judge and grace_before is None:
            logger.warning(
                "reader %r: heartbeats went back or could not be written for a session (a "
                "failover or an outage); removing no member for %.1fs so every live one can "
                "beat again",
                self.reader_id,
                self._session_timeout_ms / 1000,
            )
        own = renewal.before is not None and renewal.before[0] == self.generation
        fresh = now - self._refreshed_ms < self._session_timeout_ms
        if beats is None and own and fresh and self.is_member():
            return Liveness(now, (), None, True)
        self._refreshed_ms = now
        state = yield from self.refresh_steps()
        if beats is None:
            return Liveness(now, (), None, self.is_member(state) or self.member_after_recovery())
        others = {r: rec for r, rec in state.readers.items() if r != self.reader_id}
        removed = []
        expired = expired_readers(others, beats, now, self._session_timeout_ms) if may_judge else []
        for reader_id, generation in expired:
            if (yield from self.remove_if_steps(reader_id, generation)):
                removed.append(reader_id)
                logger.info(
                    "reader %r removed dead reader %r (generation %d) from %s: no heartbeat "
                    "within the session timeout (%d ms); its segments return to the group at "
                    "their committed positions",
                    self.reader_id,
                    reader_id,
                    generation,
                    self.sync.name,
                    self._session_timeout_ms,
                )
        state = self.state
        others = {r: rec for r, rec in state.readers.items() if r != self.reader_id}
        return Liveness(
            now,
            tuple(removed),
            next_expiry_ms(others, beats, self._session_timeout_ms),
            self.is_member(state) or self.member_after_recovery(),
        )

    def remove_if_steps(
        self,
        reader_id: str,
        generation: int,
        positions: Sequence[tuple[SegKey, int]] = (),
        epochs: Sequence[tuple[SegKey, int]] = (),
    ) -> Steps[bool]:
        """Remove ``reader_id`` if it is still online in ``generation`` (and forget that
        generation's heartbeat); ``False`` if it was not."""
        removed = yield from call(
            "sync.update_state",
            plan_remove(reader_id, generation, positions, self.server_ms, epochs),
        )
        if removed is not None:
            yield from call("heartbeats.forget", reader_id, generation)
            yield from self._withdraw_format(reader_id, generation)
        return removed is not None

    def _withdraw_format(self, reader_id: str, generation: int) -> Steps[None]:
        """Drop a removed member's announcement (best effort: a stale one is ignored anyway,
        being of an older generation)."""
        try:
            yield from call("heartbeats.withdraw", reader_id, generation)
        except ReaderGroupError as exc:
            logger.warning(
                "could not drop reader %r's announced log format: %s", reader_id, exc, exc_info=exc
            )

    @_recovers
    def leave_steps(
        self,
        positions: Mapping[SegKey, int] | None = None,
        epochs: Mapping[SegKey, int] | None = None,
    ) -> Steps[bool]:
        """Leave the group; owned segments return at ``positions`` (else committed ones),
        with the epochs they were read under where ``epochs`` has them."""
        self._joined = False  # a regressed log met while leaving must not rejoin
        left = yield from self.remove_if_steps(
            self.reader_id,
            self.generation,
            tuple((positions or {}).items()),
            tuple((epochs or {}).items()),
        )
        yield from call("heartbeats.forget", self.reader_id, self.generation)
        if left:
            logger.info(
                "reader %r (generation %d) left %s", self.reader_id, self.generation, self.sync.name
            )
            if not self.state.readers:
                yield from self._compact_emptied_group()
        return left

    def _compact_emptied_group(self) -> Steps[None]:
        """Snapshot the log of a group this reader left empty: a reader joining reads the log
        from its newest snapshot, which every version reads (see
        :mod:`~readergroup.core.log_format`), so stopping every reader of a group then starting
        readers of the previous version works even after entries of a newer format. Best
        effort: on failure such readers are refused (typed) until the next compaction."""
        try:
            with translate_errors("compact the group log"):
                yield from call("sync.compact")
        except ReaderGroupError as exc:
            logger.warning(
                "reader %r left %s empty but could not compact its log: %s",
                self.reader_id,
                self.sync.name,
                exc,
                exc_info=exc,
            )

    @_recovers
    def rebalance_steps(
        self,
        release_positions: Mapping[SegKey, int],
        *,
        fetched_at: int | None = None,
        only_listed: bool = False,
        release_epochs: Mapping[SegKey, int] | None = None,
        lag: int = NO_LAG,
    ) -> Steps[tuple[dict[SegKey, Assignment], list[SegKey]]]:
        """Release above-share segments at ``release_positions`` (``only_listed``: none but
        those; with the epochs they were read under, where ``release_epochs`` has them) and
        acquire below-share ones (nothing moves while a checkpoint or reset awaits this
        reader).

        A release cut short by ``max_moves`` is followed by another at once (each re-decided on
        fresh state), so no share waits for the next refresh; the acquisition takes the whole
        share in one update. ``fetched_at``: the caller refreshed the state at that revision
        in the same step (see :meth:`refresh_steps`), so a decision to move nothing is taken
        on it without reading the log again: one read per wake-up.

        ``lag``: this reader's (see :meth:`commit_steps`), carried on its moves while the
        members are those its latest commit found all reading the newest format.

        Returns ``(acquired, released)``. Raises ReaderNotInGroupError if no longer a member.
        """
        me, generation, moves = self.reader_id, self.generation, self._max_moves
        if self.state.readers is not self._newest_for:
            lag = NO_LAG
        positions = dict(release_positions)
        released: list[SegKey] = []
        # bounded: every capped round gives back ``moves`` of the segments owned now
        for _ in range(len(self.state.owned_by(me)) // moves + 1):
            plan = plan_release(
                me, generation, moves, positions, release_epochs, only_listed=only_listed, lag=lag
            )
            chosen = yield from call("sync.update_state", plan, fetched_at=fetched_at)
            fetched_at = self._fresh_after(fetched_at)
            released.extend(chosen)
            if len(chosen) < moves:
                break
        plan = plan_acquire(me, generation, self.server_ms, lag)
        chosen = yield from call("sync.update_state", plan, fetched_at=fetched_at)
        # another thread may have adopted a regressed log since: keep what we still own
        mine = self.state.owned_by(me)
        acquired = {s: mine[s] for s in chosen if s in mine}
        if released:
            logger.info("reader %r released %s of %s", me, segments_text(released), self.sync.name)
        if acquired:
            logger.info("reader %r acquired %s of %s", me, segments_text(acquired), self.sync.name)
        return acquired, released

    def _fresh_after(self, fetched_at: int | None) -> int | None:
        """After an ``update_state`` in a step fresh at ``fetched_at``: the replica is fresh
        at its revision now (it fetched, or its own append landed at the head)."""
        return None if fetched_at is None else int(self.sync.revision)

    @_recovers
    def ack_checkpoint_steps(self, name: str, positions: Mapping[SegKey, int]) -> Steps[None]:
        """Report this reader's positions for checkpoint ``name``."""
        yield from call(
            "sync.update_state",
            plan_ack_checkpoint(
                self.reader_id, self.generation, name, tuple(positions.items()), self.server_ms
            ),
        )
        logger.info(
            "reader %r acknowledged checkpoint %r of %s", self.reader_id, name, self.sync.name
        )

    @_recovers
    def ack_reset_steps(self, group_generation: int) -> Steps[None]:
        yield from call(
            "sync.update_state", plan_ack_reset(self.reader_id, self.generation, group_generation)
        )
        logger.info(
            "reader %r acknowledged the reset of %s (group generation %d)",
            self.reader_id,
            self.sync.name,
            group_generation,
        )

    @_recovers
    def commit_steps(
        self,
        positions: Mapping[SegKey, tuple[int, int]],
        epochs: Mapping[SegKey, int] | None = None,
        lag: int = NO_LAG,
    ) -> Steps[None]:
        """Record ``segment -> (token, position)`` (with the epoch each was read under, where
        ``epochs`` has it, and this reader's ``lag``: events behind the tails of its segments,
        reported while every member reads the newest log format); fenced readers get an
        error, nothing lands."""
        if not positions:
            return
        triples = tuple((s, token, position) for s, (token, position) in positions.items())
        given = epochs or {}
        known = tuple((s, given[s]) for s in positions if s in given)
        lag = self._reportable(lag)
        yield from call(
            "sync.update_state", plan_commit(self.reader_id, self.generation, triples, known, lag)
        )

    def _reportable(self, lag: int) -> int:
        """``lag`` if the group's log is written in the newest format (every member reads the
        field), else :data:`NO_LAG`."""
        if lag < 0:
            return lag
        readers = self.state.readers
        if self._log_format(self.state) < NEWEST_FORMAT:
            return NO_LAG
        self._newest_for = readers
        return lag

    @_recovers
    def rewind_steps(self, rewinds: Mapping[SegKey, tuple[int, int, int]]) -> Steps[None]:
        """Move committed positions back where their logs diverged: ``segment -> (token,
        position, epoch)`` (:class:`~readergroup.core.group_state.RewindPositions`)."""
        if not rewinds:
            return
        quads = tuple(
            (s, token, position, epoch) for s, (token, position, epoch) in rewinds.items()
        )
        yield from call("sync.update_state", plan_rewind(self.reader_id, self.generation, quads))
        logger.warning(
            "reader %r moved the committed positions of %s of %s back to where their logs "
            "diverged in a failover",
            self.reader_id,
            segments_text(list(rewinds)),
            self.sync.name,
        )

    @_recovers
    def complete_segments_steps(
        self,
        completions: Sequence[tuple[SegKey, int, int]],
        successors: Sequence[tuple[SegKey, tuple[SegKey, ...], int]],
    ) -> Steps[bool]:
        """Each ``(segment, token, end)`` was read to the end of its seal (offset ``end``):
        complete them all in one update and hand their ``successors`` (each once, with all
        its predecessors and its start) to the group. ``False`` (nothing changed) while a
        checkpoint or reset awaits this reader."""
        plan = plan_complete(self.reader_id, self.generation, tuple(completions), tuple(successors))
        completed = yield from call("sync.update_state", plan)
        if completed:
            logger.info(
                "reader %r completed %s of %s; successors: %s",
                self.reader_id,
                segments_text([s for s, _, _ in completions]),
                self.sync.name,
                segments_text([s for s, _, _ in successors]),
            )
        return bool(completed)


class GroupMember(MemberSteps):
    """A reader's actions on the group state (the threaded shell of :class:`MemberSteps`:
    each call blocks until its steps are over). Its owner's threads may call any method (the
    synchronizer serializes them)."""

    sync: StateSynchronizer[GroupState]
    heartbeats: HeartbeatStore

    def __init__(
        self,
        sync: StateSynchronizer[GroupState],
        heartbeats: HeartbeatStore,
        reader_id: str,
        *,
        session_timeout_ms: int,
        max_moves: int,
        judge_every_ms: int | None = None,
    ) -> None:
        super().__init__(
            sync,
            heartbeats,
            reader_id,
            session_timeout_ms=session_timeout_ms,
            max_moves=max_moves,
            judge_every_ms=judge_every_ms,
        )

    recover = blocking(MemberSteps.recover_steps)
    refresh = blocking(MemberSteps.refresh_steps)
    join = blocking(MemberSteps.join_steps)
    heartbeat = blocking(MemberSteps.heartbeat_steps)
    remove_if = blocking(MemberSteps.remove_if_steps)
    leave = blocking(MemberSteps.leave_steps)
    rebalance = blocking(MemberSteps.rebalance_steps)
    ack_checkpoint = blocking(MemberSteps.ack_checkpoint_steps)
    ack_reset = blocking(MemberSteps.ack_reset_steps)
    commit = blocking(MemberSteps.commit_steps)
    rewind = blocking(MemberSteps.rewind_steps)
    complete_segments = blocking(MemberSteps.complete_segments_steps)

    def complete(
        self,
        segment: SegKey,
        token: int,
        successors: Sequence[tuple[SegKey, tuple[SegKey, ...], int]],
        end: int = -1,
    ) -> bool:
        """The segment was read to the end of its seal (offset ``end``): see
        :meth:`MemberSteps.complete_segments_steps`."""
        return self.complete_segments(((segment, token, end),), successors)
