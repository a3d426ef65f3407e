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
* :class:`CommitPositions`: an owner records how far the application has processed;
* :class:`RewindPositions`: an owner moves committed positions back to where a segment's log
  diverged in a failover (the offsets past it were lost, and new events are there now).

Lag: a commit, an acquisition or a release may carry its reader's lag (events behind the tails
of the segments it owns, a tagged field: see :class:`CommitPositions`), recorded in
``lag_reports``. The balancing turns
read ``lags``, the reports as *published* by the last update that moved segments or members
(join, leave, acquire, release, completion): those updates wake the readers with a move to
make, decided on the state after them, so a commit (which wakes nobody) never changes whose
turn it is between a wake-up and the move it is for. A removed reader's lag is dropped.

Epochs: a position may come with the log epoch (``epoch.lua``) of the event before it, as
the reader read it (``epochs``); the next owner checks the segment's log still holds that
(:func:`readergroup.core.epochs.committed_divergence`), so offsets a failover lost below a
committed position are reported, not skipped. An epoch follows its position: a position
moved without one (an older client) drops it.

Fencing: every update from a reader names its membership generation and, per segment, the
fencing token it holds. A reader that was removed, or lost a segment, is refused atomically
(the conditional append re-checks against the newest state). Tokens only grow, so an
application can fence its own sinks with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any, ClassVar

from readergroup.core import columns
from readergroup.core.errors import (
    CheckpointError,
    ReaderAlreadyOnlineError,
    ReaderNotInGroupError,
    SegmentNotOwnedError,
)
from readergroup.core.fair_share import readers_with_moves
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.persistent import PMap, PSet, pmap, pset
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

    def __post_init__(self) -> None:
        if not isinstance(self.positions, PMap):  # acknowledgements merge in O(their size)
            object.__setattr__(self, "positions", PMap(self.positions))

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
    """The group's state. Immutable: the collections an update changes (``readers``,
    ``assigned``, ``unassigned``, ``future``, ``completed``, ``waiting_ends``) are persistent
    (:mod:`readergroup.core.persistent`; any mapping or set given is converted), so applying an
    update costs O(size of the change), sharing the rest with the state before."""

    scope: str
    name: str
    config: ReaderGroupConfig
    readers: Mapping[str, ReaderRecord]
    assigned: Mapping[SegKey, Assignment]
    unassigned: Mapping[SegKey, int]
    future: Mapping[SegKey, tuple[SegKey, ...]]
    completed: Set[SegKey]
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
    epochs: Mapping[SegKey, int] = field(default_factory=dict)
    """Per assigned or unassigned segment, the log epoch its position was read under (the
    epoch of the event before it), where known."""
    lag_reports: Mapping[str, int] = field(default_factory=dict)
    """Per online reader, the lag its latest commit reported (events behind the tails of its
    segments), where one did."""
    lags: Mapping[str, int] = field(default_factory=dict)
    """``lag_reports`` as published by the latest move (see the module doc): what the
    balancing turns read (:func:`~readergroup.core.fair_share.lag_ranks`)."""
    _owners: PMap[str, PMap[SegKey, Assignment]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    """Index of ``assigned`` by owner, built on first use and carried through the updates
    that move segments (:func:`_changed`); not part of the state (``init=False`` fields
    are not encoded), so it never reaches the log or a snapshot."""

    def __post_init__(self) -> None:
        for name in _PERSISTENT_MAPS:
            value = getattr(self, name)
            if not isinstance(value, PMap):
                object.__setattr__(self, name, PMap(value))
        if not isinstance(self.completed, PSet):
            object.__setattr__(self, "completed", PSet(self.completed))

    def to_wire(self) -> list[Any]:
        """The compact form snapshots are written in (:func:`state_to_wire`)."""
        return state_to_wire(self)

    @classmethod
    def from_wire(cls, wire: Any) -> GroupState:
        """The state back from :meth:`to_wire`'s form; ``ValueError`` if malformed."""
        return state_from_wire(wire)

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

    def frozen_readers(self) -> frozenset[str]:
        """Every reader :meth:`frozen_for` holds still."""
        pending = [c.pending for c in self.checkpoints if not c.done]
        return frozenset(self.reset_pending).union(*pending)

    @property
    def end_of_data(self) -> bool:
        """Every segment the group may read was read to its end: a bounded group at its end
        cut, or (with or without an end cut) every stream it reads sealed and read to the
        end (nothing owned, unassigned or waiting, and segments were completed). Pravega's
        reader reports this as the read being completed."""
        if self.assigned or self.unassigned or self.future:
            return False
        return self.end is not None or bool(self.completed)

    def owned_by(self, reader_id: str) -> dict[SegKey, Assignment]:
        return dict(self.owners().get(reader_id, {}))

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(self.readers, 0)
        for reader_id, owned in self.owners().items():
            if owned:
                counts[reader_id] = len(owned)
        return counts

    def owners(self) -> Mapping[str, Mapping[SegKey, Assignment]]:
        """Owner -> its assignments (O(S) once per state lineage, then carried)."""
        owners = self._owners
        if owners is None:
            built: dict[str, dict[SegKey, Assignment]] = {}
            for segment, assignment in self.assigned.items():
                built.setdefault(assignment.reader, {})[segment] = assignment
            owners = PMap((r, PMap(m)) for r, m in built.items())
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


_PERSISTENT_MAPS = (
    "readers",
    "assigned",
    "unassigned",
    "future",
    "waiting_ends",
    "epochs",
    "lag_reports",
    "lags",
)


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


def _changed(
    old: GroupState,
    removed: Iterable[tuple[SegKey, Assignment]] = (),
    added: Iterable[tuple[SegKey, Assignment]] = (),
    **changes: Any,
) -> GroupState:
    """``replace(old, **changes)`` with ``old``'s owner index (if built) carried: the
    ``removed`` assignments out, the ``added`` ones in, O(change x log S)."""
    new = replace(old, **changes)
    index = old._owners
    if index is None:
        return new
    dropped: dict[str, list[SegKey]] = {}
    put: dict[str, list[tuple[SegKey, Assignment]]] = {}
    for segment, assignment in removed:
        dropped.setdefault(assignment.reader, []).append(segment)
    for segment, assignment in added:
        put.setdefault(assignment.reader, []).append((segment, assignment))
    empty: PMap[SegKey, Assignment] = PMap()
    owners = [
        (reader, index.get(reader, empty).evolve(put.get(reader, ()), dropped.get(reader, ())))
        for reader in dropped.keys() | put.keys()
    ]
    emptied = [reader for reader, owned in owners if not owned]
    object.__setattr__(new, "_owners", index.evolve([o for o in owners if o[1]], emptied))
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


MAX_NAMED_WAKES = 256
"""Most readers a join, acquisition or release names in its wake-up; past that it wakes all."""


def readers_to_move(state: GroupState) -> frozenset[str]:
    """The readers the balancing rules (turns included) give a move in ``state``, frozen
    readers excepted (:func:`~readergroup.core.fair_share.readers_with_moves` on its counts)."""
    return readers_with_moves(
        state.counts(), len(state.unassigned), state.frozen_readers(), state.lags
    )


def movers(state: GroupState) -> frozenset[str] | None:
    """Whom a join, acquisition or release leaving the group at ``state`` wakes
    (statesync's ``Update.wakes``): the readers with a move to make there
    (:func:`~readergroup.core.fair_share.readers_with_moves`: in turn, frozen readers
    excepted), as the others would move nothing; ``None`` (every reader) past
    :data:`MAX_NAMED_WAKES`. Other updates (removals, checkpoints and their acknowledgements,
    resets, completions) wake every reader: they may unfreeze one or change the turns."""
    named = readers_to_move(state)
    return named if len(named) <= MAX_NAMED_WAKES else None


def _moved_epochs(
    state: GroupState,
    moves: Iterable[tuple[SegKey, int, int]],
    given: tuple[tuple[SegKey, int], ...],
) -> Mapping[SegKey, int]:
    """``state.epochs`` after positions moved: ``(segment, old, position given)`` per segment
    (the position becomes the larger). A position moved up takes the epoch ``given`` with it
    (none given: not known any more); one given where it was takes a given epoch; one given
    below keeps its own."""
    known = dict(given)
    epochs = pmap(state.epochs)
    put: list[tuple[SegKey, int]] = []
    drop: list[SegKey] = []
    for segment, old, new in moves:
        epoch = known.get(segment, -1)
        if epoch >= 0 and new >= old:
            put.append((segment, epoch))
        elif new > old and segment in epochs:
            drop.append(segment)
    return epochs.evolve(put, drop) if put or drop else epochs


_EPOCHS_TAGGED = frozenset({"epochs"})
"""Position epochs are tagged fields (see ``statesync.codec``): a reader that does not know them
moves the positions without epochs, which only skips the divergence check there."""

NO_LAG = -1
"""A commit's ``lag`` when it reports none (a previous version's, or one written for readers
of an older log format, which would refuse the field)."""


def without_lags(state: GroupState) -> GroupState:
    """``state`` with no lag known (a snapshot in the form the previous versions read, for a
    group none of whose readers is live: nobody ranks by the lags dropped)."""
    if not (state.lag_reports or state.lags):
        return state
    return _changed(state, lag_reports=PMap(), lags=PMap())


def _published(state: GroupState) -> Mapping[str, int]:
    """The lags a move publishes: the latest reports (the same persistent map, O(1))."""
    return state.lag_reports


def _reported(state: GroupState, reader_id: str, lag: int) -> Mapping[str, int]:
    """``state.lag_reports`` with ``reader_id``'s ``lag`` (unchanged for :data:`NO_LAG`)."""
    reports = state.lag_reports
    if lag < 0 or reports.get(reader_id) == lag:
        return reports
    return pmap(reports).set(reader_id, lag)


@dataclass(frozen=True)
class AddReader(Update):
    reader_id: str
    joined_ms: int

    def conflict_keys(self) -> tuple[str, ...]:
        return (reader_key(self.reader_id),)

    def wakes(self, state: GroupState) -> frozenset[str] | None:
        return movers(state)

    def apply_to(self, state: GroupState) -> GroupState:
        if self.reader_id in state.readers:
            raise ReaderAlreadyOnlineError(f"reader {self.reader_id!r} is already online")
        record = ReaderRecord(self.reader_id, state.next_generation, self.joined_ms)
        return _changed(
            state,
            readers=pmap(state.readers).set(self.reader_id, record),
            next_generation=state.next_generation + 1,
            lags=_published(state),
        )


@dataclass(frozen=True)
class RemoveReader(Update):
    """Remove a reader; its segments become unassigned at ``positions`` where given (a graceful
    leave), else at their last committed positions (a crash or a fenced reader)."""

    tagged_fields: ClassVar[frozenset[str]] = _EPOCHS_TAGGED

    reader_id: str
    generation: int
    positions: tuple[tuple[SegKey, int], ...] = ()
    now_ms: int = 0
    epochs: tuple[tuple[SegKey, int], ...] = ()
    """The epoch each position of ``positions`` was read under, where known."""

    def apply_to(self, state: GroupState) -> GroupState:
        check_member(state, self.reader_id, self.generation)
        given = dict(self.positions)
        owned = state.owners().get(self.reader_id, {})
        released = {
            segment: max(assignment.position, given.get(segment, assignment.position))
            for segment, assignment in owned.items()
        }
        moves = ((s, owned[s].position, given[s]) for s in released if s in given)
        assigned = pmap(state.assigned).evolve(deletes=released)
        unassigned = pmap(state.unassigned).evolve(released.items())
        readers = pmap(state.readers).delete(self.reader_id)
        reports = pmap(state.lag_reports)
        if self.reader_id in reports:
            reports = reports.delete(self.reader_id)
        checkpoints = tuple(
            _acknowledged(c, self.reader_id, released, self.now_ms)
            if self.reader_id in c.pending and not c.done
            else c
            for c in state.checkpoints
        )
        return _changed(
            state,
            removed=owned.items(),
            readers=readers,
            assigned=assigned,
            unassigned=unassigned,
            checkpoints=checkpoints,
            reset_pending=tuple(r for r in state.reset_pending if r != self.reader_id),
            epochs=_moved_epochs(state, moves, self.epochs),
            lag_reports=reports,
            lags=reports,
        )


@dataclass(frozen=True)
class AcquireSegments(Update):
    """Take unassigned segments; ``lag`` (tagged): the reader's lag as it decided (see
    :class:`CommitPositions`)."""

    tagged_fields: ClassVar[frozenset[str]] = frozenset({"lag"})

    reader_id: str
    generation: int
    segments: tuple[SegKey, ...]
    now_ms: int
    lag: int = NO_LAG

    def conflict_keys(self) -> tuple[str, ...]:
        return _keys(self.reader_id, self.segments)

    def wakes(self, state: GroupState) -> frozenset[str] | None:
        return movers(state)

    def apply_to(self, state: GroupState) -> GroupState:
        check_member(state, self.reader_id, self.generation)
        acquired: dict[SegKey, Assignment] = {}
        token = state.next_token
        for segment in self.segments:
            position = state.unassigned.get(segment)
            if position is None or segment in acquired:
                raise SegmentNotOwnedError(f"segment {segment} is not unassigned")
            acquired[segment] = Assignment(self.reader_id, position, token, self.now_ms)
            token += 1
        return _changed(
            state,
            added=acquired.items(),
            assigned=pmap(state.assigned).evolve(acquired.items()),
            unassigned=pmap(state.unassigned).evolve(deletes=acquired),
            next_token=token,
            lag_reports=(reports := _reported(state, self.reader_id, self.lag)),
            lags=reports,
        )


@dataclass(frozen=True)
class ReleaseSegments(Update):
    """Give segments back at the given positions: ``(segment, token, position)``; ``lag``
    (tagged): the reader's lag as it decided (see :class:`CommitPositions`)."""

    tagged_fields: ClassVar[frozenset[str]] = _EPOCHS_TAGGED | {"lag"}

    reader_id: str
    generation: int
    releases: tuple[tuple[SegKey, int, int], ...]
    epochs: tuple[tuple[SegKey, int], ...] = ()
    """The epoch each released position was read under, where known."""
    lag: int = NO_LAG

    def conflict_keys(self) -> tuple[str, ...]:
        return _keys(self.reader_id, (s for s, _, _ in self.releases))

    def wakes(self, state: GroupState) -> frozenset[str] | None:
        return movers(state)

    def apply_to(self, state: GroupState) -> GroupState:
        released: dict[SegKey, int] = {}
        previous: list[tuple[SegKey, Assignment]] = []
        for segment, token, position in self.releases:
            current = check_owner(state, self.reader_id, self.generation, segment, token)
            if segment in released:
                raise SegmentNotOwnedError(f"segment {segment} is released twice")
            released[segment] = max(position, current.position)
            previous.append((segment, current))
        given = {s: p for s, _, p in self.releases}
        moves = ((s, a.position, given[s]) for s, a in previous)
        return _changed(
            state,
            removed=previous,
            assigned=pmap(state.assigned).evolve(deletes=released),
            unassigned=pmap(state.unassigned).evolve(released.items()),
            epochs=_moved_epochs(state, moves, self.epochs),
            lag_reports=(reports := _reported(state, self.reader_id, self.lag)),
            lags=reports,
        )


@dataclass(frozen=True)
class CommitPositions(Update):
    """Record processed positions: ``(segment, token, position)``; positions never go back.

    Wakes no follower: no reader acts on another's progress (readers block on the group's
    wake stream, so commits cost them nothing). ``lag`` (a tagged field, format 3): the
    reader's lag as it committed, recorded in ``lag_reports`` (the next move publishes it);
    :data:`NO_LAG`: none reported."""

    wakes_followers: ClassVar[bool] = False
    tagged_fields: ClassVar[frozenset[str]] = _EPOCHS_TAGGED | {"lag"}

    reader_id: str
    generation: int
    positions: tuple[tuple[SegKey, int, int], ...]
    epochs: tuple[tuple[SegKey, int], ...] = ()
    """The epoch each position was read under (of the event before it), where known."""
    lag: int = NO_LAG
    """Events the reader was behind the tails of its segments as it committed."""

    def conflict_keys(self) -> tuple[str, ...]:
        return _keys(self.reader_id, (s for s, _, _ in self.positions))

    def apply_to(self, state: GroupState) -> GroupState:
        committed: dict[SegKey, Assignment] = {}
        moves: list[tuple[SegKey, int, int]] = []
        for segment, token, position in self.positions:
            current = check_owner(state, self.reader_id, self.generation, segment, token)
            current = committed.get(segment, current)
            committed[segment] = replace(current, position=max(position, current.position))
            moves.append((segment, current.position, position))
        return _changed(
            state,
            added=committed.items(),
            assigned=pmap(state.assigned).evolve(committed.items()),
            epochs=_moved_epochs(state, moves, self.epochs),
            lag_reports=_reported(state, self.reader_id, self.lag),
        )


@dataclass(frozen=True)
class RewindPositions(Update):
    """Move committed positions back to where a segment's log diverged in a failover:
    ``(segment, token, position, epoch)`` per segment, ``epoch`` the log's epoch of the event
    before ``position`` (-1: none). Only the owner under its current fencing token; only back
    (a position already at or below ``position`` stays). The owner found the log no longer
    holds the offsets from ``position`` on that it (or an earlier owner) read, and reported
    them lost: a crash now resumes at ``position``, where the events that are there now
    begin. Wakes nobody, as commits."""

    wakes_followers: ClassVar[bool] = False

    reader_id: str
    generation: int
    rewinds: tuple[tuple[SegKey, int, int, int], ...]

    def conflict_keys(self) -> tuple[str, ...]:
        return _keys(self.reader_id, (s for s, _, _, _ in self.rewinds))

    def apply_to(self, state: GroupState) -> GroupState:
        moved: dict[SegKey, Assignment] = {}
        epochs = pmap(state.epochs)
        for segment, token, position, epoch in self.rewinds:
            current = check_owner(state, self.reader_id, self.generation, segment, token)
            current = moved.get(segment, current)
            if position >= current.position:
                continue
            moved[segment] = replace(current, position=max(0, position))
            epochs = epochs.set(segment, epoch) if epoch >= 0 else epochs.delete(segment)
        if not moved:
            return state
        return _changed(
            state,
            added=moved.items(),
            assigned=pmap(state.assigned).evolve(moved.items()),
            epochs=epochs,
        )


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
    (the maps are persistent: nothing is copied). Keys: the reader, the completed segments and the
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
        finished: list[tuple[SegKey, Assignment]] = []
        for segment, token, end in self.completions:
            finished.append(
                (segment, check_owner(state, self.reader_id, self.generation, segment, token))
            )
            ends[segment] = end
        assigned = pmap(state.assigned).evolve(deletes=ends)
        completed = pset(state.completed).union(ends)
        future = pmap(state.future)
        unassigned = pmap(state.unassigned)
        waiting = pmap(state.waiting_ends)
        for successor, predecessors, start in self.successors:
            if successor in completed or successor in assigned or successor in unassigned:
                continue
            if state.end is not None and successor not in state.end:
                continue  # past the end cut of a bounded group
            # reached or not, every predecessor must complete first
            pending = tuple(p for p in future.get(successor, predecessors) if p not in completed)
            if pending:
                future = future.set(successor, pending)
                reached = {p: ends[p] for p in predecessors if ends.get(p, -1) >= 0}
                if reached:
                    waiting = waiting.set(successor, {**waiting.get(successor, {}), **reached})
            else:
                future = future.delete(successor)
                waiting = waiting.delete(successor)
                unassigned = unassigned.set(successor, start)
        epochs = pmap(state.epochs)
        return _changed(
            state,
            removed=finished,
            assigned=assigned,
            unassigned=unassigned,
            future=future,
            completed=completed,
            waiting_ends=waiting,
            epochs=epochs.evolve(deletes=[s for s in ends if s in epochs]) if epochs else epochs,
            lags=_published(state),
        )


def _acknowledged(
    checkpoint: Checkpoint, reader_id: str, positions: Mapping[SegKey, int], now_ms: int
) -> Checkpoint:
    """The checkpoint after ``reader_id`` reported ``positions``; complete once nobody is left."""
    pending = tuple(r for r in checkpoint.pending if r != reader_id)
    merged = pmap(checkpoint.positions).evolve(positions.items())
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
        return _changed(state, checkpoints=_trim((*state.checkpoints, checkpoint)))


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
        return _changed(
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
        return _changed(state, checkpoints=_trim(checkpoints))


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
            epochs={},
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
        return _changed(
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
    RewindPositions,
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
    for segment in state.epochs:
        assert segment in state.assigned or segment in state.unassigned, f"{segment} epoch"
    for reader_id in chain(state.lag_reports, state.lags):
        assert reader_id in state.readers, f"lag of offline reader {reader_id}"


# -- compact form (snapshots) -----------------------------------------------------------------
# A snapshot of a 16k-segment group written object by object was 16k msgpack extensions per
# map; this form is a few arrays of ints and strings per map (readergroup.core.columns), packed
# and unpacked by msgpack's C code. ``[form, scope, name, config, streams, readers, assigned,
# unassigned, future, completed, next_generation, next_token, generation, created_ms,
# checkpoints, end, reset_pending, waiting_ends, epochs]``, segment keys as ``[stream indexes,
# ids]`` over ``streams``; ``epochs`` (form 2) is ``[assigned, unassigned]``, each a column of
# epochs in the order of that map's keys (-1: none), so it costs no keys of its own. Form 3 adds
# ``lags``: ``[reader ids, reported, published]`` (-1: none); it is written only while a lag is
# known (only readers of log format 3 report one), so a group without lags keeps form 2, which
# the previous versions read (the last reader to leave a group compacts it: no lags then).
WIRE_FORM = 2
LAGS_WIRE_FORM = 3
READ_FORMS = (1, 2, 3)
"""Forms read: form 1 (before position epochs) has no ``epochs``, form 2 no ``lags``."""
_FIELDS = {1: 18, 2: 19, 3: 20}


def _position_columns(table: columns.StreamTable, values: Mapping[SegKey, int]) -> list[Any]:
    return [*table.key_columns(values.keys()), list(values.values())]


def _positions_from(streams: list[str], wire: Any, what: str) -> dict[SegKey, int]:
    keys, offsets = columns.fields(wire, what, 3)[:2], wire[2]
    found = columns.keys_from_columns(streams, keys, what)
    return dict(zip(found, columns.ints(offsets, f"{what} offsets", len(found)), strict=True))


def _assignment_columns(assignments: list[Assignment]) -> list[list[Any]]:
    """The columns of ``assignments`` in the order a decoded snapshot's base holds them."""
    return [
        columns.attribute(assignments, name)
        for name in ("reader", "position", "token", "acquired_ms")
    ]


def _assigned_columns(table: columns.StreamTable, state: GroupState) -> list[list[Any]]:
    """``assigned`` in columns, grouped by owner (so decoding splits it by owner in one pass)."""
    parts = [
        columns.to_columns(table, owned, _assignment_columns) for owned in state.owners().values()
    ]
    if sum(len(part[0]) for part in parts) != len(state.assigned):  # never: the index is exact
        return columns.to_columns(table, state.assigned, _assignment_columns)
    return [list(chain.from_iterable(part[column] for part in parts)) for column in range(6)]


def _one_column(values: list[int]) -> list[list[int]]:
    return [values]


def state_to_wire(state: GroupState) -> list[Any]:
    table = columns.StreamTable()
    readers = list(state.readers.values())
    owners = columns.StreamTable()  # reader ids, indexed like stream names
    attribute = columns.attribute
    streams, ids, names, positions, tokens, acquired = _assigned_columns(table, state)
    unassigned = columns.to_columns(table, state.unassigned, _one_column)
    lagging = state.lag_reports or state.lags
    wire = [
        LAGS_WIRE_FORM if lagging else WIRE_FORM,
        state.scope,
        state.name,
        state.config,
        table.streams,
        [
            attribute(readers, "reader_id"),
            attribute(readers, "generation"),
            attribute(readers, "joined_ms"),
        ],
        [streams, ids, owners.indexes(names), positions, tokens, acquired, owners.streams],
        unassigned,
        [
            [*table.key_columns([successor]), table.key_columns(pending)]
            for successor, pending in state.future.items()
        ],
        table.key_columns(state.completed),
        state.next_generation,
        state.next_token,
        state.generation,
        state.created_ms,
        [
            [
                c.name,
                c.created_ms,
                list(c.pending),
                _position_columns(table, c.positions),
                c.silent,
                c.completed_ms,
                c.failed,
            ]
            for c in state.checkpoints
        ],
        None if state.end is None else _position_columns(table, state.end),
        list(state.reset_pending),
        [
            [*table.key_columns([successor]), _position_columns(table, ends)]
            for successor, ends in state.waiting_ends.items()
        ],
        [
            _epoch_column(state.epochs, table.streams, [streams, ids]),
            _epoch_column(state.epochs, table.streams, unassigned),
        ],
    ]
    if lagging:
        lag_ids = sorted({*state.lag_reports, *state.lags})
        wire.append(
            [
                lag_ids,
                [state.lag_reports.get(r, NO_LAG) for r in lag_ids],
                [state.lags.get(r, NO_LAG) for r in lag_ids],
            ]
        )
    return wire


def _lags_from(wire: Any) -> tuple[dict[str, int], dict[str, int]]:
    """``(lag_reports, lags)`` of form 3's ``lags`` field."""
    ids, reported, published = columns.fields(wire, "lags", 3)
    reader_ids = columns.strings(ids, "lag reader ids")
    reports = columns.ints(reported, "reported lags", len(reader_ids))
    lags = columns.ints(published, "published lags", len(reader_ids))
    return (
        {r: lag for r, lag in zip(reader_ids, reports, strict=True) if lag >= 0},
        {r: lag for r, lag in zip(reader_ids, lags, strict=True) if lag >= 0},
    )


def _epoch_column(
    epochs: Mapping[SegKey, int], streams: list[str], key_columns: list[Any]
) -> list[int]:
    """The epoch of each key of ``key_columns`` (``[stream indexes, ids]`` over ``streams``,
    in their wire order; -1: none), or ``[]`` when no epoch is known."""
    if not epochs:
        return []
    indexes, ids = key_columns[:2]
    return [epochs.get((streams[s], i), -1) for s, i in zip(indexes, ids, strict=True)]


def _epochs_from(keys: columns.KeyColumns, wire: Any, what: str) -> Iterable[tuple[SegKey, int]]:
    """The epochs of a column of them over ``keys`` (a map's decoded key columns): a key
    tuple is made only for the rows with an epoch."""
    if wire == []:  # no epochs known
        return ()
    epochs = columns.ints(wire, what, len(keys))
    rows = [row for row, epoch in enumerate(epochs) if epoch >= 0]
    return zip(keys.keys(rows), map(epochs.__getitem__, rows), strict=True)


def state_from_wire(wire: Any) -> GroupState:
    form = wire[0] if type(wire) is list and wire else None
    if form not in READ_FORMS:
        raise ValueError(f"group state form {form!r} is not supported (reads {READ_FORMS})")
    wire = columns.fields(wire, "group state", _FIELDS[form])
    streams = columns.strings(wire[4], "stream table")
    ids, generations, joined = columns.fields(wire[5], "readers", 3)
    reader_ids = columns.strings(ids, "reader ids")
    count = len(reader_ids)
    readers = zip(
        reader_ids,
        map(
            ReaderRecord,
            reader_ids,
            columns.ints(generations, "reader generations", count),
            columns.ints(joined, "reader join times", count),
        ),
        strict=True,
    )
    assigned_keys = columns.KeyColumns(
        streams, columns.fields(wire[6], "assigned", 7)[:2], "assigned"
    )
    assigned, owners = _assigned_from(assigned_keys, wire[6])
    unassigned = _position_column_map(streams, wire[7], "unassigned")
    future: dict[SegKey, tuple[SegKey, ...]] = {}
    for item in columns.sequence(wire[8], "future"):
        successor_wire = columns.fields(item, "future segment", 3)
        (successor,) = columns.keys_from_columns(streams, successor_wire[:2], "future segment")
        future[successor] = tuple(columns.keys_from_columns(streams, item[2], "predecessors"))
    checkpoints = []
    for item in columns.sequence(wire[14], "checkpoints"):
        name, created, pending, positions, silent, completed_ms, failed = columns.fields(
            item, "checkpoint", 7
        )
        if not (isinstance(name, str) and isinstance(failed, str) and type(silent) is bool):
            raise ValueError("checkpoint name, failure or silent flag of the wrong type")
        checkpoints.append(
            Checkpoint(
                name,
                columns.ints([created], "checkpoint time")[0],
                tuple(columns.strings(pending, "checkpoint pending readers")),
                _positions_from(streams, positions, "checkpoint positions"),
                silent,
                columns.ints([completed_ms], "checkpoint completion")[0],
                failed,
            )
        )
    waiting: dict[SegKey, Mapping[SegKey, int]] = {}
    for item in columns.sequence(wire[17], "waiting ends"):
        successor_wire = columns.fields(item, "waiting successor", 3)
        (successor,) = columns.keys_from_columns(streams, successor_wire[:2], "waiting segment")
        waiting[successor] = _positions_from(streams, item[2], "waiting ends")
    epochs: list[tuple[SegKey, int]] = []
    if form != 1:
        assigned_epochs, unassigned_epochs = columns.fields(wire[18], "epochs", 2)
        epochs.extend(_epochs_from(assigned_keys, assigned_epochs, "assigned epochs"))
        epochs.extend(_epochs_from(unassigned.key_columns, unassigned_epochs, "unassigned epochs"))
    lag_reports, lags = _lags_from(wire[19]) if form == LAGS_WIRE_FORM else ({}, {})
    scope, name, config = wire[1:4]
    if not (isinstance(scope, str) and isinstance(name, str)):
        raise ValueError("scope or name is not a string")
    if not isinstance(config, ReaderGroupConfig):
        raise ValueError(f"config is {type(config).__name__}, not a ReaderGroupConfig")
    next_generation, next_token, generation, created_ms = columns.ints(wire[10:14], "counters")
    state = GroupState(
        scope,
        name,
        config,
        PMap(readers),
        assigned,
        PMap.over(unassigned),
        PMap(future),
        PSet(columns.keys_from_columns(streams, wire[9], "completed")),
        next_generation=next_generation,
        next_token=next_token,
        generation=generation,
        created_ms=created_ms,
        checkpoints=tuple(checkpoints),
        end=None if wire[15] is None else _positions_from(streams, wire[15], "end"),
        reset_pending=tuple(columns.strings(wire[16], "reset pending readers")),
        waiting_ends=PMap(waiting),
        epochs=PMap(epochs),
        lag_reports=PMap(lag_reports),
        lags=PMap(lags),
    )
    object.__setattr__(state, "_owners", owners)
    return state


def _assigned_from(
    keys: columns.KeyColumns, wire: list[Any]
) -> tuple[PMap[SegKey, Assignment], PMap[str, PMap[SegKey, Assignment]]]:
    """``assigned`` and its owner index over the snapshot's columns (``keys``: its first two,
    decoded): no ``Assignment`` is built until one is read (decoding a 16k-segment group built
    16k of them, most never read)."""
    count = len(keys)
    owner_names = columns.strings(wire[6], "owner table")
    owner_indexes = columns.ints(wire[2], "owners", count)
    if owner_indexes and not 0 <= min(owner_indexes) <= max(owner_indexes) < len(owner_names):
        raise ValueError(f"owners outside the table of {len(owner_names)}")
    table = columns.ColumnMap(
        keys,
        [
            list(map(owner_names.__getitem__, owner_indexes)),
            columns.ints(wire[3], "positions", count),
            columns.ints(wire[4], "tokens", count),
            columns.ints(wire[5], "acquisition times", count),
        ],
        Assignment,
    )
    by_owner = table.split(owner_indexes)
    owners = PMap((owner_names[i], PMap.over(view)) for i, view in by_owner.items())
    return PMap.over(table), owners


def _position_column_map(streams: list[str], wire: Any, what: str) -> columns.ColumnMap[int]:
    keys, offsets = columns.fields(wire, what, 3)[:2], wire[2]
    found = columns.KeyColumns(streams, keys, what)
    return columns.ColumnMap(
        found, [columns.ints(offsets, f"{what} offsets", len(found))], columns.same
    )
