"""One reader's membership in a group: join, heartbeat, liveness, balance, commit, complete.

The protocol shell between the pure core (:mod:`~readergroup.group_state`,
:mod:`~readergroup.balance`) and storage. It depends only on a state synchronizer, a
:class:`HeartbeatStore` and nothing else, so the same code runs against Redis in production and
against :class:`~statesync.MemoryLogBackend` plus :class:`MemoryHeartbeatStore` in the
deterministic simulation.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from readergroup.balance import (
    expired_readers,
    next_expiry_ms,
    segments_to_acquire,
    segments_to_release,
)
from readergroup.group_state import (
    AckCheckpoint,
    AckReset,
    AcquireSegments,
    AddReader,
    Assignment,
    CommitPositions,
    CompleteSegment,
    GroupState,
    ReaderAlreadyOnlineError,
    ReleaseSegments,
    RemoveReader,
    SegKey,
    check_member,
    check_owner,
)
from statesync import LogRegressedError, StateSynchronizer

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def _recovers(
    method: Callable[Concatenate[GroupMember, P], R],
) -> Callable[Concatenate[GroupMember, P], R]:
    """Run ``method``; after a regressed log, recover (see the module doc) and run it again."""

    @functools.wraps(method)
    def run(member: GroupMember, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(member, *args, **kwargs)
        except LogRegressedError as exc:
            member.recover(exc)
            return method(member, *args, **kwargs)

    return run


class HeartbeatStore(Protocol):
    """Where heartbeats live, stamped with the storage's own clock."""

    def beat(self, reader_id: str, generation: int) -> tuple[int, dict[str, tuple[int, int]]]:
        """Renew (``reader_id == ""``: only read); return server ms and every heartbeat."""
        ...

    def forget(self, reader_id: str) -> None: ...


class MemoryHeartbeatStore:
    """Heartbeats in a dict with an injected clock (simulations and tests)."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._beats: dict[str, tuple[int, int]] = {}

    def beat(self, reader_id: str, generation: int) -> tuple[int, dict[str, tuple[int, int]]]:
        now = self._now_ms()
        if reader_id:
            self._beats[reader_id] = (generation, now)
        return now, dict(self._beats)

    def forget(self, reader_id: str) -> None:
        self._beats.pop(reader_id, None)


@dataclass(frozen=True, slots=True)
class Liveness:
    """What a heartbeat learned: server time, who was removed, when to look again."""

    now_ms: int
    removed: tuple[str, ...]
    next_expiry_ms: int | None
    member: bool


class GroupMember:
    """A reader's actions on the group state. All changes are conditional appends."""

    def __init__(
        self,
        sync: StateSynchronizer[GroupState],
        heartbeats: HeartbeatStore,
        reader_id: str,
        *,
        session_timeout_ms: int,
        max_moves: int,
    ) -> None:
        self.sync = sync
        self.heartbeats = heartbeats
        self.reader_id = reader_id
        self.generation = 0
        self.server_ms = 0
        """Server time seen by the latest heartbeat (stamps acquisitions)."""
        self._session_timeout_ms = session_timeout_ms
        self._max_moves = max_moves
        self._joined = False
        self._recovery = threading.Lock()

    @property
    def state(self) -> GroupState:
        return self.sync.state

    def recover(self, cause: LogRegressedError) -> None:
        """Adopt the group log's state after ``cause``; rejoin if the log lost our join."""
        with self._recovery:
            logger.warning(
                "reader %r: the group log lost writes it had applied; adopting the log",
                self.reader_id,
                exc_info=cause,
            )
            self.sync.resync()
            if self._joined and not self.is_member():
                self._join(replace_own=True)
                logger.info(
                    "reader %r rejoined the group as generation %d after the log regressed",
                    self.reader_id,
                    self.generation,
                )

    @_recovers
    def refresh(self) -> GroupState:
        self.sync.fetch_updates()
        state: GroupState = self.sync.state
        return state

    def is_member(self, state: GroupState | None = None) -> bool:
        state = state or self.sync.state
        record = state.readers.get(self.reader_id)
        return record is not None and record.generation == self.generation

    def join(self) -> int:
        """Become an online member; return the new generation.

        A previous incarnation with this id that stopped beating is removed first (its
        segments return at their committed positions); a live one is an error.
        """
        try:
            return self._join(replace_own=False)
        except LogRegressedError:
            self.sync.resync()
            return self._join(replace_own=False)

    def _join(self, *, replace_own: bool) -> int:
        """Join; ``replace_own``: a record under this id is this member's own, left behind by a
        regressed log, and is replaced whatever its heartbeat says."""
        now, beats = self.heartbeats.beat("", 0)
        self.server_ms = now
        me = self.reader_id
        timeout = self._session_timeout_ms

        def join(state: GroupState) -> Any:
            record = state.readers.get(me)
            updates: list[Any] = []
            if record is not None:
                if not replace_own and not expired_readers({me: record}, beats, now, timeout):
                    raise ReaderAlreadyOnlineError(
                        f"reader {me!r} is already online in group {state.scope}/{state.name} "
                        f"(heartbeat within the last {timeout / 1000:.0f}s); use another id"
                    )
                updates.append(RemoveReader(me, record.generation))
            updates.append(AddReader(me, now))
            return updates

        self.sync.fetch_updates()
        self.sync.update_state(join)
        self.generation = self.sync.state.readers[me].generation
        self._joined = True
        self.heartbeats.beat(me, self.generation)
        return self.generation

    @_recovers
    def heartbeat(self) -> Liveness:
        """Renew this reader's heartbeat and remove members whose session expired."""
        now, beats = self.heartbeats.beat(self.reader_id, self.generation)
        self.server_ms = now
        state = self.refresh()
        others = {r: rec for r, rec in state.readers.items() if r != self.reader_id}
        removed = []
        for reader_id, generation in expired_readers(others, beats, now, self._session_timeout_ms):
            if self._remove_if(reader_id, generation):
                removed.append(reader_id)
                self.heartbeats.forget(reader_id)
        state = self.sync.state
        others = {r: rec for r, rec in state.readers.items() if r != self.reader_id}
        return Liveness(
            now,
            tuple(removed),
            next_expiry_ms(others, beats, self._session_timeout_ms),
            self.is_member(state),
        )

    def _remove_if(
        self, reader_id: str, generation: int, positions: Sequence[tuple[SegKey, int]] = ()
    ) -> bool:
        def remove(state: GroupState) -> Any:
            record = state.readers.get(reader_id)
            if record is None or record.generation != generation:
                return [], False
            update = RemoveReader(reader_id, generation, tuple(positions), self.server_ms)
            return [update], True

        return bool(self.sync.update_state(remove))

    @_recovers
    def leave(self, positions: Mapping[SegKey, int] | None = None) -> bool:
        """Leave the group; owned segments return at ``positions`` (else committed ones)."""
        self._joined = False  # a regressed log met while leaving must not rejoin
        left = self._remove_if(self.reader_id, self.generation, tuple((positions or {}).items()))
        self.heartbeats.forget(self.reader_id)
        return left

    @_recovers
    def rebalance(
        self, release_positions: Mapping[SegKey, int]
    ) -> tuple[dict[SegKey, Assignment], list[SegKey]]:
        """Release above-share segments at ``release_positions`` and acquire below-share ones.

        Returns ``(acquired, released)``. Raises ReaderNotInGroupError if no longer a member.
        """
        me, generation, moves = self.reader_id, self.generation, self._max_moves
        state = self.refresh()
        check_member(state, me, generation)
        if state.frozen_for(me):
            return {}, []  # a checkpoint or reset awaits this reader: move nothing until then
        released: list[SegKey] = []
        if segments_to_release(state, me, moves):

            def release(current: GroupState) -> Any:
                check_member(current, me, generation)
                chosen = segments_to_release(current, me, moves)
                owned = current.assigned
                triples = tuple(
                    (s, owned[s].token, release_positions.get(s, owned[s].position)) for s in chosen
                )
                return ([ReleaseSegments(me, generation, triples)] if triples else []), chosen

            released = list(self.sync.update_state(release))
        acquired: dict[SegKey, Assignment] = {}
        if segments_to_acquire(self.sync.state, me, moves):

            def acquire(current: GroupState) -> Any:
                check_member(current, me, generation)
                chosen = segments_to_acquire(current, me, moves)
                update = AcquireSegments(me, generation, tuple(chosen), self.server_ms)
                return ([update] if chosen else []), chosen

            chosen = self.sync.update_state(acquire)
            state = self.sync.state
            acquired = {s: state.assigned[s] for s in chosen}
        return acquired, released

    @_recovers
    def ack_checkpoint(self, name: str, positions: Mapping[SegKey, int]) -> None:
        """Report this reader's positions for checkpoint ``name``."""
        update = AckCheckpoint(
            self.reader_id, self.generation, name, tuple(positions.items()), self.server_ms
        )
        me, generation = self.reader_id, self.generation

        def ack(state: GroupState) -> Any:
            check_member(state, me, generation)
            return [update]

        self.sync.update_state(ack)

    @_recovers
    def ack_reset(self, group_generation: int) -> None:
        me, generation = self.reader_id, self.generation

        def ack(state: GroupState) -> Any:
            check_member(state, me, generation)
            return [AckReset(me, generation, group_generation)]

        self.sync.update_state(ack)

    @_recovers
    def commit(self, positions: Mapping[SegKey, tuple[int, int]]) -> None:
        """Record ``segment -> (token, position)``; fenced readers get an error, nothing lands."""
        if not positions:
            return
        me, generation = self.reader_id, self.generation
        triples = tuple((s, token, position) for s, (token, position) in positions.items())

        def commit(state: GroupState) -> Any:
            for segment, token, _ in triples:
                check_owner(state, me, generation, segment, token)
            return [CommitPositions(me, generation, triples)]

        self.sync.update_state(commit)

    @_recovers
    def complete(
        self,
        segment: SegKey,
        token: int,
        successors: Sequence[tuple[SegKey, tuple[SegKey, ...], int]],
    ) -> None:
        """The segment was read to the end of its seal: hand its successors to the group."""
        me, generation = self.reader_id, self.generation

        def complete(state: GroupState) -> Any:
            check_owner(state, me, generation, segment, token)
            return [CompleteSegment(me, generation, segment, token, tuple(successors))]

        self.sync.update_state(complete)
