"""A reader group's shared state and the updates that change it. Pure code.

The state lives in a state synchronizer named ``group:<scope>/<group>``. Every segment the
group knows is in exactly one of four places:

* ``assigned``: owned by an online reader, with its last committed position and the fencing
  token of that ownership;
* ``unassigned``: free, with the position the next owner starts from;
* ``future``: a successor waiting for its predecessors (listed) to complete;
* ``completed``: read to the end of a sealed segment.

A successor becomes assignable only once *every* one of its predecessors is completed, whether
or not the group has reached that predecessor yet (per-key order across a split followed by a
merge). While it waits, the ends of its completed predecessors are kept (``waiting_ends``), so
the group's positions (and every stream cut and checkpoint taken from them) always cover the
key space.

Transitions (each an :class:`~statesync.Update`, appended conditionally; the ``check_*``
functions below are run by the writer on the current state first, so an update that would fail
is never appended, and fenced readers get a specific error):

* :class:`AddReader`: a reader joins with a fresh membership generation;
* :class:`RemoveReader`: a reader leaves (graceful, with its positions) or is declared dead
  (its segments return at their last committed positions);
* :class:`AcquireSegments`: unassigned -> assigned, each with a new fencing token;
* :class:`ReleaseSegments`: assigned -> unassigned at the given positions;
* :class:`CompleteSegments`: assigned -> completed (any number at once); their successors
  enter ``future`` (or ``unassigned`` once no predecessor is pending);
* :class:`CommitPositions`: an owner records how far the application has processed.

Fencing: every update from a reader names its membership generation and, per segment, the
fencing token it holds. A reader that was removed, or lost a segment, is refused atomically
(the conditional append re-checks against the newest state). Tokens only grow, so an
application can fence its own sinks with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar

from readergroup.core.errors import (
    CheckpointError,
    ReaderAlreadyOnlineError,
    ReaderNotInGroupError,
    SegmentNotOwnedError,
)
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.stream_cut import StreamCut
from statesync import Update

#: A segment of a group: ``("scope/stream", segment id)``.
SegKey = tuple[str, int]


MAX_OUTSTANDING_CHECKPOINTS = 3
KEPT_CHECKPOINTS = 10


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A group-wide consistent cut, collected from every reader online when it was initiated.

    ``positions`` holds, per segment, the position every event before which had been returned
    to the application when its reader handed out the checkpoint (so the application's state
    saved at that checkpoint covers exactly those events).
    """

    name: str
    created_ms: int
    pending: tuple[str, ...]
    positions: Mapping[SegKey, int]
    silent: bool = False
    completed_ms: int = -1
    failed: str = ""

    @property
    def done(self) -> bool:
        return self.completed_ms >= 0 or bool(self.failed)


@dataclass(frozen=True, slots=True)
class ReaderRecord:
    reader_id: str
    generation: int
    joined_ms: int


@dataclass(frozen=True, slots=True)
class Assignment:
    reader: str
    position: int
    token: int
    acquired_ms: int


@dataclass(frozen=True, slots=True)
class GroupState:
    scope: str
    name: str
    config: ReaderGroupConfig
    readers: Mapping[str, ReaderRecord]
    assigned: Mapping[SegKey, Assignment]
    unassigned: Mapping[SegKey, int]
    future: Mapping[SegKey, tuple[SegKey, ...]]
    completed: frozenset[SegKey]
    next_generation: int = 1
    next_token: int = 1
    generation: int = 0
    """Group generation: bumped by resets; readers re-initialize when it changes."""
    created_ms: int = 0
    checkpoints: tuple[Checkpoint, ...] = ()
    """Outstanding checkpoints, then the last completed or failed ones (newest last)."""
    end: Mapping[SegKey, int] | None = None
    """Bounded reads: the end offset of every segment the group may read; ``None``: unbounded."""
    reset_pending: tuple[str, ...] = ()
    """Readers that have not yet acknowledged the latest reset."""
    waiting_ends: Mapping[SegKey, Mapping[SegKey, int]] = field(default_factory=dict)
    """Per ``future`` successor: its completed predecessors and the offsets they ended at."""
    _owners: dict[str, dict[SegKey, Assignment]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    """Index of ``assigned`` by owner, built on first use and carried through the updates
    that move segments (:func:`_with_owners`); not part of the state (``init=False`` fields
    are not encoded), so it never reaches the log or a snapshot."""

    def checkpoint(self, name: str) -> Checkpoint | None:
        for checkpoint in reversed(self.checkpoints):
            if checkpoint.name == name:
                return checkpoint
        return None

    def frozen_for(self, reader_id: str) -> bool:
        """Whether ``reader_id`` must not move segments: a checkpoint or reset awaits it."""
        if reader_id in self.reset_pending:
            return True
        return any(reader_id in c.pending for c in self.checkpoints if not c.done)

    @property
    def end_of_data(self) -> bool:
        """Bounded group with every segment read to its end."""
        return self.end is not None and not (self.assigned or self.unassigned or self.future)

    def owned_by(self, reader_id: str) -> dict[SegKey, Assignment]:
        return dict(self.owners().get(reader_id, {}))

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(self.readers, 0)
        for reader_id, owned in self.owners().items():
            if owned:
                counts[reader_id] = len(owned)
        return counts

    def owners(self) -> Mapping[str, Mapping[SegKey, Assignment]]:
        """Owner -> its assignments (read-only view; O(S) once per state, then carried)."""
        owners = self._owners
        if owners is None:
            owners = {}
            for segment, assignment in self.assigned.items():
                owners.setdefault(assignment.reader, {})[segment] = assignment
            object.__setattr__(self, "_owners", owners)
        return owners

    def positions(self) -> dict[SegKey, int]:
        """Committed position of every segment that has one (assigned or unassigned), plus the
        end of every completed predecessor a waiting successor still needs: together they
        cover the key space of every stream (a valid stream cut)."""
        out = self.unowned_positions()
        out.update({s: a.position for s, a in self.assigned.items()})
        return out

    def unowned_positions(self) -> dict[SegKey, int]:
        """Positions no reader reports: unassigned segments and completed predecessors of
        waiting successors (at their ends)."""
        out: dict[SegKey, int] = {}
        for ends in self.waiting_ends.values():
            out.update(ends)
        out.update(self.unassigned)
        return out


def new_group(
    scope: str,
    name: str,
    config: ReaderGroupConfig,
    starts: Mapping[SegKey, int],
    now_ms: int,
    end: Mapping[SegKey, int] | None = None,
) -> GroupState:
    """A group whose segments all start unassigned at ``starts`` (reading up to ``end``, the
    end offset of every segment it may read, if bounded)."""
    return GroupState(
        scope,
        name,
        config,
        {},
        {},
        dict(starts),
        {},
        frozenset(),
        created_ms=now_ms,
        end=None if end is None else dict(end),
    )


def _with_owners(old: GroupState, new: GroupState, changed: Iterable[SegKey]) -> GroupState:
    """``new`` with ``old``'s owner index (if built) updated for the ``changed`` segments: a
    copy of the index's outer map and of each touched owner's map, O(R + change)."""
    index = old._owners
    if index is None:
        return new
    owners = dict(index)
    copied: set[str] = set()

    def mine(reader_id: str) -> dict[SegKey, Assignment]:
        if reader_id not in copied:
            copied.add(reader_id)
            owners[reader_id] = dict(owners.get(reader_id, {}))
        return owners[reader_id]

    for segment in changed:
        before, after = old.assigned.get(segment), new.assigned.get(segment)
        if before is not None:
            mine(before.reader).pop(segment, None)
        if after is not None:
            mine(after.reader)[segment] = after
    object.__setattr__(new, "_owners", owners)
    return new


# -- checks (raise the specific error a writer should see) ------------------------------------
def check_member(state: GroupState, reader_id: str, generation: int) -> ReaderRecord:
    record = state.readers.get(reader_id)
    if record is None or record.generation != generation:
        raise ReaderNotInGroupError(
            f"reader {reader_id!r} (generation {generation}) is not online in group "
            f"{state.scope}/{state.name}; create the reader again to rejoin"
        )
    return record


def check_owner(
    state: GroupState, reader_id: str, generation: int, segment: SegKey, token: int
) -> Assignment:
    check_member(state, reader_id, generation)
    assignment = state.assigned.get(segment)
    if assignment is None or assignment.reader != reader_id or assignment.token != token:
        raise SegmentNotOwnedError(
            f"reader {reader_id!r} does not own segment {segment} under fencing token {token}"
        )
    return assignment


# -- updates ----------------------------------------------------------------------------------
# Conflict keys (statesync's ``Update.conflict_keys``): a reader's record and each segment's
# place. Updates touching only those (join, acquire, release, commit, completions) land past
# each other when their keys are disjoint; the rest (leaves and removals, checkpoints,
# resets) concern the whole state and conflict with everything.
def reader_key(reader_id: str) -> str:
    return f"r:{reader_id}"


def segment_key(segment: SegKey) -> str:
    return f"s:{segment[0]}/{segment[1]}"


def _keys(reader_id: str, segments: Iterable[SegKey]) -> tuple[str, ...]:
    return (reader_key(reader_id), *(segment_key(s) for s in segments))


@dataclass(frozen=True)
class AddReader(Update):
    reader_id: str
    joined_ms: int

    def conflict_keys(self) -> tuple[str, ...]:
        return (reader_key(self.reader_id),)

    def apply_to(self, state: GroupState) -> GroupState:
        if self.reader_id in state.readers:
            raise ReaderAlreadyOnlineError(f"reader {self.reader_id!r} is already online")
        record = ReaderRecord(self.reader_id, state.next_generation, self.joined_ms)
        return replace(
            state,
            readers={**state.readers, self.reader_id: record},
            next_generation=state.next_generation + 1,
        )


@dataclass(frozen=True)
class RemoveReader(Update):
    """Remove a reader; its segments become unassigned at ``positions`` where given (a graceful
    leave), else at their last committed positions (a crash or a fenced reader)."""

    reader_id: str
    generation: int
    positions: tuple[tuple[SegKey, int], ...] = ()
    now_ms: int = 0

    def apply_to(self, state: GroupState) -> GroupState:
        check_member(state, self.reader_id, self.generation)
        given = dict(self.positions)
        assigned = dict(state.assigned)
        unassigned = dict(state.unassigned)
        for segment, assignment in state.assigned.items():
            if assignment.reader == self.reader_id:
                del assigned[segment]
                unassigned[segment] = max(
                    assignment.position, given.get(segment, assignment.position)
                )
        readers = {r: rec for r, rec in state.readers.items() if r != self.reader_id}
        released = {
            s: unassigned[s] for s, a in state.assigned.items() if a.reader == self.reader_id
        }
        checkpoints = tuple(
            _acknowledged(c, self.reader_id, released, self.now_ms)
            if self.reader_id in c.pending and not c.done
            else c
            for c in state.checkpoints
        )
        new = replace(
            state,
            readers=readers,
            assigned=assigned,
            unassigned=unassigned,
            checkpoints=checkpoints,
            reset_pending=tuple(r for r in state.reset_pending if r != self.reader_id),
        )
        return _with_owners(state, new, released)


@dataclass(frozen=True)
class AcquireSegments(Update):
    reader_id: str
    generation: int
    segments: tuple[SegKey, ...]
    now_ms: int

    def conflict_keys(self) -> tuple[str, ...]:
        return _keys(self.reader_id, self.segments)

    def apply_to(self, state: GroupState) -> GroupState:
        check_member(state, self.reader_id, self.generation)
        assigned = dict(state.assigned)
        unassigned = dict(state.unassigned)
        token = state.next_token
        for segment in self.segments:
            if segment not in unassigned:
                raise SegmentNotOwnedError(f"segment {segment} is not unassigned")
            assigned[segment] = Assignment(
                self.reader_id, unassigned.pop(segment), token, self.now_ms
            )
            token += 1
        new = replace(state, assigned=assigned, unassigned=unassigned, next_token=token)
        return _with_owners(state, new, self.segments)


@dataclass(frozen=True)
class ReleaseSegments(Update):
    """Give segments back at the given positions: ``(segment, token, position)``."""

    reader_id: str
    generation: int
    releases: tuple[tuple[SegKey, int, int], ...]

    def conflict_keys(self) -> tuple[str, ...]:
        return _keys(self.reader_id, (s for s, _, _ in self.releases))

    def apply_to(self, state: GroupState) -> GroupState:
        assigned = dict(state.assigned)
        unassigned = dict(state.unassigned)
        for segment, token, position in self.releases:
            current = check_owner(state, self.reader_id, self.generation, segment, token)
            del assigned[segment]
            unassigned[segment] = max(position, current.position)
        new = replace(state, assigned=assigned, unassigned=unassigned)
        return _with_owners(state, new, (s for s, _, _ in self.releases))


@dataclass(frozen=True)
class CommitPositions(Update):
    """Record processed positions: ``(segment, token, position)``; positions never go back.

    Wakes no follower: no reader acts on another's progress (readers block on the group's
    wake stream, so commits cost them nothing)."""

    wakes_followers: ClassVar[bool] = False

    reader_id: str
    generation: int
    positions: tuple[tuple[SegKey, int, int], ...]

    def conflict_keys(self) -> tuple[str, ...]:
        return _keys(self.reader_id, (s for s, _, _ in self.positions))

    def apply_to(self, state: GroupState) -> GroupState:
        assigned = dict(state.assigned)
        for segment, token, position in self.positions:
            current = check_owner(state, self.reader_id, self.generation, segment, token)
            assigned[segment] = replace(current, position=max(position, current.position))
        new = replace(state, assigned=assigned)
        return _with_owners(state, new, (s for s, _, _ in self.positions))


@dataclass(frozen=True)
class CompleteSegment(Update):
    """One completion (the update readers wrote before :class:`CompleteSegments`; kept so
    logs holding it stay readable): :class:`CompleteSegments` of ``segment`` alone."""

    reader_id: str
    generation: int
    segment: SegKey
    token: int
    successors: tuple[tuple[SegKey, tuple[SegKey, ...], int], ...]
    end: int = -1

    def apply_to(self, state: GroupState) -> GroupState:
        completion = ((self.segment, self.token, self.end),)
        return CompleteSegments(
            self.reader_id, self.generation, completion, self.successors
        ).apply_to(state)


@dataclass(frozen=True)
class CompleteSegments(Update):
    """The owner read sealed segments to their ends: ``completions`` holds
    ``(segment, token, end)`` (``end``: the offset read to, ``-1`` if unknown);
    ``successors`` each successor of any of them once, with all its predecessors and the
    position it starts from (its head). The segments become completed; a successor enters
    ``future`` (or ``unassigned`` once no predecessor is pending).

    One update for any number of segments (a merge of thousands completes in one log entry),
    the same as completing them one by one, at O(segments changed + successors' predecessors)
    beyond copying the maps once. Keys: the reader, the completed segments and the
    successors (a successor's place depends only on its predecessors' completions, and each
    of those names it)."""

    reader_id: str
    generation: int
    completions: tuple[tuple[SegKey, int, int], ...]
    successors: tuple[tuple[SegKey, tuple[SegKey, ...], int], ...]

    def conflict_keys(self) -> tuple[str, ...]:
        touched = [s for s, _, _ in self.completions] + [s for s, _, _ in self.successors]
        return _keys(self.reader_id, touched)

    def apply_to(self, state: GroupState) -> GroupState:
        ends: dict[SegKey, int] = {}
        for segment, token, end in self.completions:
            check_owner(state, self.reader_id, self.generation, segment, token)
            ends[segment] = end
        assigned = dict(state.assigned)
        for segment in ends:
            del assigned[segment]
        completed = state.completed.union(ends)
        future = dict(state.future)
        unassigned = dict(state.unassigned)
        waiting = dict(state.waiting_ends)
        for successor, predecessors, start in self.successors:
            if successor in completed or successor in assigned or successor in unassigned:
                continue
            if state.end is not None and successor not in state.end:
                continue  # past the end cut of a bounded group
            # reached or not, every predecessor must complete first
            pending = tuple(p for p in future.get(successor, predecessors) if p not in completed)
            if pending:
                future[successor] = pending
                reached = {p: ends[p] for p in predecessors if ends.get(p, -1) >= 0}
                if reached:
                    waiting[successor] = {**waiting.get(successor, {}), **reached}
            else:
                future.pop(successor, None)
                waiting.pop(successor, None)
                unassigned[successor] = start
        new = replace(
            state,
            assigned=assigned,
            unassigned=unassigned,
            future=future,
            completed=completed,
            waiting_ends=waiting,
        )
        return _with_owners(state, new, ends)


def _acknowledged(
    checkpoint: Checkpoint, reader_id: str, positions: Mapping[SegKey, int], now_ms: int
) -> Checkpoint:
    """The checkpoint after ``reader_id`` reported ``positions``; complete once nobody is left."""
    pending = tuple(r for r in checkpoint.pending if r != reader_id)
    merged = {**checkpoint.positions, **positions}
    # server time of the last acknowledgement (as its reader last saw it), never before creation
    completed = max(now_ms, checkpoint.created_ms, 0) if not pending else checkpoint.completed_ms
    return replace(checkpoint, pending=pending, positions=merged, completed_ms=completed)


@dataclass(frozen=True)
class CreateCheckpoint(Update):
    """Start checkpoint ``name``: every online reader must acknowledge it. Unassigned segments
    and the completed predecessors of waiting successors are recorded at their positions now
    (no reader will report them)."""

    name: str
    created_ms: int
    silent: bool = False

    def apply_to(self, state: GroupState) -> GroupState:
        check_new_checkpoint(state, self.name)
        checkpoint = Checkpoint(
            self.name,
            self.created_ms,
            tuple(sorted(state.readers)),
            state.unowned_positions(),
            self.silent,
        )
        if not checkpoint.pending:
            checkpoint = replace(
                checkpoint, positions=state.positions(), completed_ms=self.created_ms
            )
        return replace(state, checkpoints=_trim((*state.checkpoints, checkpoint)))


def check_new_checkpoint(state: GroupState, name: str) -> None:
    if state.checkpoint(name) is not None:
        raise CheckpointError(f"a checkpoint named {name!r} already exists in this group")
    outstanding = [c.name for c in state.checkpoints if not c.done]
    if len(outstanding) >= MAX_OUTSTANDING_CHECKPOINTS:
        raise CheckpointError(
            f"{len(outstanding)} checkpoints are outstanding ({outstanding}); the most is "
            f"{MAX_OUTSTANDING_CHECKPOINTS}"
        )


def _trim(checkpoints: tuple[Checkpoint, ...]) -> tuple[Checkpoint, ...]:
    """Keep every outstanding checkpoint and the newest finished ones."""
    finished = [c for c in checkpoints if c.done][-KEPT_CHECKPOINTS:]
    return tuple(c for c in checkpoints if not c.done or c in finished)


@dataclass(frozen=True)
class AckCheckpoint(Update):
    """A reader's part of a checkpoint: the positions of every segment it owns."""

    reader_id: str
    generation: int
    name: str
    positions: tuple[tuple[SegKey, int], ...]
    now_ms: int

    def apply_to(self, state: GroupState) -> GroupState:
        check_member(state, self.reader_id, self.generation)
        checkpoint = state.checkpoint(self.name)
        if checkpoint is None or checkpoint.done or self.reader_id not in checkpoint.pending:
            return state
        updated = _acknowledged(checkpoint, self.reader_id, dict(self.positions), self.now_ms)
        return replace(
            state,
            checkpoints=_trim(tuple(updated if c is checkpoint else c for c in state.checkpoints)),
        )


@dataclass(frozen=True)
class FailCheckpoint(Update):
    name: str
    reason: str

    def apply_to(self, state: GroupState) -> GroupState:
        checkpoints = tuple(
            replace(c, failed=self.reason) if c.name == self.name and not c.done else c
            for c in state.checkpoints
        )
        return replace(state, checkpoints=_trim(checkpoints))


@dataclass(frozen=True)
class ResetGroup(Update):
    """Start over from ``starts``: every segment unassigned there, the generation bumped, and
    every online reader asked to acknowledge before it reads again."""

    starts: tuple[tuple[SegKey, int], ...]
    end: tuple[tuple[SegKey, int], ...] | None = None

    def apply_to(self, state: GroupState) -> GroupState:
        return replace(
            state,
            assigned={},
            unassigned=dict(self.starts),
            future={},
            completed=frozenset(),
            waiting_ends={},
            generation=state.generation + 1,
            end=None if self.end is None else dict(self.end),
            reset_pending=tuple(sorted(state.readers)),
            checkpoints=_trim(
                tuple(
                    c if c.done else replace(c, failed="the reader group was reset")
                    for c in state.checkpoints
                )
            ),
        )


@dataclass(frozen=True)
class AckReset(Update):
    reader_id: str
    generation: int
    group_generation: int

    def apply_to(self, state: GroupState) -> GroupState:
        check_member(state, self.reader_id, self.generation)
        if state.generation != self.group_generation:
            return state
        return replace(
            state, reset_pending=tuple(r for r in state.reset_pending if r != self.reader_id)
        )


STATE_TYPES: tuple[type, ...] = (
    GroupState,
    ReaderRecord,
    Assignment,
    Checkpoint,
    ReaderGroupConfig,
    StreamCut,
)
UPDATE_TYPES: tuple[type[Update], ...] = (
    AddReader,
    RemoveReader,
    AcquireSegments,
    ReleaseSegments,
    CommitPositions,
    CompleteSegment,
    CompleteSegments,
    CreateCheckpoint,
    AckCheckpoint,
    FailCheckpoint,
    ResetGroup,
    AckReset,
)


def check_invariants(state: GroupState) -> None:
    """Raise AssertionError unless every segment is in exactly one place, every assignment
    belongs to an online reader, and tokens are unique and below ``next_token``."""
    places: list[Iterable[SegKey]] = [
        state.assigned,
        state.unassigned,
        state.future,
        state.completed,
    ]
    seen: set[SegKey] = set()
    for place in places:
        for segment in place:
            assert segment not in seen, f"segment {segment} is in two places"
            seen.add(segment)
    if state._owners is not None:  # the carried owner index agrees with ``assigned``
        rebuilt: dict[str, dict[SegKey, Assignment]] = {}
        for segment, assignment in state.assigned.items():
            rebuilt.setdefault(assignment.reader, {})[segment] = assignment
        assert {r: m for r, m in state._owners.items() if m} == rebuilt, "owner index stale"
    tokens = [a.token for a in state.assigned.values()]
    assert len(set(tokens)) == len(tokens), "two assignments share a fencing token"
    assert all(t < state.next_token for t in tokens)
    for segment, assignment in state.assigned.items():
        assert assignment.reader in state.readers, f"{segment} owned by offline {assignment.reader}"
    for successor, pending in state.future.items():
        assert pending, f"future segment {successor} has no pending predecessor"
    for successor, ends in state.waiting_ends.items():
        assert successor in state.future, f"{successor} has waiting ends but is not future"
        assert set(ends) <= state.completed, f"{successor} waits on uncompleted ends {ends}"
