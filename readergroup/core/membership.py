"""The membership protocol as pure plans: the generators a reader's changes pass to
``update_state`` (join, remove, release, acquire, commit, complete, acknowledgements), and the
:class:`HeartbeatStore` interface heartbeats are kept behind. Pure code.

Every precondition of a change lives inside its plan, on the state the plan is given: a
conditional append re-runs the plan on the newest state after a conflict. The I/O shell that
runs the plans is :class:`~readergroup.admin.group_member.GroupMember`; the exhaustive explorer
(``tests/test_explore.py``) drives the same plans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, TypeVar

from readergroup.core.balance import (
    expired_readers,
    segments_to_acquire,
    segments_to_release,
)
from readergroup.core.errors import ReaderAlreadyOnlineError, ReaderReplacedError
from readergroup.core.group_state import (
    NO_LAG,
    AckCheckpoint,
    AckReset,
    AcquireSegments,
    AddReader,
    CommitPositions,
    CompleteSegments,
    GroupState,
    ReaderRecord,
    ReleaseSegments,
    RemoveReader,
    RewindPositions,
    SegKey,
    check_member,
    check_owner,
)
from statesync import Decision, Update

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Renewal:
    """What a member's periodic heartbeat learned (see :meth:`HeartbeatStore.renew`)."""

    now_ms: int
    """The store's clock when the beat was written."""
    before: tuple[int, int] | None
    """The reader's own ``(generation, ms)`` as stored before this beat (``None``: missing)."""
    beats: dict[str, tuple[int, int]] | None
    """Every heartbeat, when it is this member's turn to judge expiries; else ``None``."""


class HeartbeatStore(Protocol):
    """Where heartbeats live, stamped with the storage's own clock. Every write and delete is
    conditional on the membership generation: a zombie (an older generation of the same id)
    can neither overwrite nor delete its replacement's heartbeat."""

    def beat(
        self, reader_id: str, generation: int, *, claim: bool = False
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        """Renew (``reader_id == ""``: only read) unless a newer generation beats under that
        id (``claim``: whatever is stored, for a join just decided on fresh state); return
        server ms and every heartbeat."""
        ...

    def renew(
        self,
        reader_id: str,
        generation: int,
        *,
        session_ms: int,
        judge_every_ms: int,
        judge: bool = False,
    ) -> Renewal:
        """A member's periodic beat, O(1): renew as :meth:`beat` does; return the server time,
        the reader's own entry as stored before, and every heartbeat only when it is this
        member's turn to judge expiries (``judge``: now): once the store's clock reaches the due
        time the previous judge left, which then moves to when the oldest beat would expire
        (``session_ms``), at least ``judge_every_ms`` ahead. One member per interval reads every
        heartbeat, not every member on every beat."""
        ...

    def forget(self, reader_id: str, generation: int) -> None:
        """Delete ``reader_id``'s heartbeat, and the client it registered, if its heartbeat is
        of ``generation`` or older."""
        ...

    def announce(self, record: ReaderRecord, log_format: int) -> None:
        """Record the newest group log format the member of ``record`` reads (see
        :mod:`~readergroup.core.log_format`)."""
        ...

    def announcements(self) -> dict[str, tuple[int, int, int]]:
        """reader id -> (generation, joined ms, newest log format it reads), as announced."""
        ...

    def withdraw(self, reader_id: str, generation: int) -> None:
        """Delete ``reader_id``'s announcement if it is of ``generation`` or older."""
        ...


# -- the generators passed to update_state ------------------------------------------------------
# Pure functions of the state: a conditional append re-runs them on the newest state after a
# conflict, so every precondition of a change lives here and nowhere else. The exhaustive
# explorer (tests/test_explore.py) drives the same functions.
Plan: TypeAlias = Callable[[GroupState], Decision[R]]
"""A generator for ``update_state`` whose result is ``R`` (what ``update_state`` returns)."""


def plan_join(
    reader_id: str,
    beats: Mapping[str, tuple[int, int]],
    now_ms: int,
    session_timeout_ms: int,
    *,
    replace_own: bool = False,
    own_generation: int | None = None,
) -> Plan[None]:
    """Add ``reader_id``. A previous incarnation under this id is replaced when it expired,
    when ``replace_own`` (static membership's takeover, or the record is this member's own,
    left behind by a regressed log), or when it is ``own_generation`` (this member rejoining
    after being fenced); a live one is refused otherwise (ReaderAlreadyOnlineError). A newer
    incarnation than ``own_generation`` means another process took this id over:
    ReaderReplacedError.

    The replaced incarnation's segments go to the new one in the same conditional update, at
    their committed positions (Kafka's static membership: a restart under the same id gets
    its segments back and nobody else moves)."""

    def join(state: GroupState) -> Decision[None]:
        record = state.readers.get(reader_id)
        updates: list[Update] = []
        kept: tuple[SegKey, ...] = ()
        if record is not None:
            if own_generation is not None and record.generation > own_generation:
                raise ReaderReplacedError(
                    f"reader {reader_id!r} (generation {own_generation}) was replaced by a "
                    f"newer incarnation (generation {record.generation}) in group "
                    f"{state.scope}/{state.name}; this one stops"
                )
            expired = expired_readers({reader_id: record}, beats, now_ms, session_timeout_ms)
            if not (replace_own or expired or record.generation == own_generation):
                raise ReaderAlreadyOnlineError(
                    f"reader {reader_id!r} is already online in group {state.scope}/"
                    f"{state.name} (heartbeat within the last {session_timeout_ms / 1000:.0f}s); "
                    "use another id, or ReaderConfig(takeover=True) to replace it"
                )
            updates.append(RemoveReader(reader_id, record.generation))
            kept = tuple(sorted(state.owned_by(reader_id)))
        updates.append(AddReader(reader_id, now_ms))
        if kept:
            updates.append(AcquireSegments(reader_id, state.next_generation, kept, now_ms))
        return updates, None

    return join


def plan_remove(
    reader_id: str,
    generation: int | None,
    positions: Sequence[tuple[SegKey, int]] = (),
    now_ms: int = 0,
    epochs: Sequence[tuple[SegKey, int]] = (),
) -> Plan[int | None]:
    """Remove ``reader_id`` if online (in ``generation``; ``None``: whichever is online).
    ``epochs``: the epoch each of ``positions`` was read under, where known. Result: the
    generation removed, or ``None`` if there was nothing to remove."""

    def remove(state: GroupState) -> Decision[int | None]:
        record = state.readers.get(reader_id)
        if record is None or generation not in (None, record.generation):
            return [], None
        update = RemoveReader(reader_id, record.generation, tuple(positions), now_ms, tuple(epochs))
        return [update], record.generation

    return remove


def plan_release(
    reader_id: str,
    generation: int,
    max_moves: int,
    positions: Mapping[SegKey, int],
    epochs: Mapping[SegKey, int] | None = None,
    *,
    only_listed: bool = False,
    lag: int = NO_LAG,
) -> Plan[list[SegKey]]:
    """Give back above-share segments at ``positions`` (else their committed ones; with the
    epochs they were read under, where ``epochs`` has them), unless a checkpoint or reset
    awaits this reader; ``only_listed``: none but those in ``positions`` (the reader stopped
    handing out exactly those): as many of them as the balance rule gives back, newest first
    (which segments is the reader's choice; how many is the rule's); ``lag``: the reader's, if
    reported. Result: the segments released."""

    def release(state: GroupState) -> Decision[list[SegKey]]:
        check_member(state, reader_id, generation)
        if state.frozen_for(reader_id):
            return [], []  # a checkpoint or reset awaits this reader: move nothing until then
        chosen = segments_to_release(state, reader_id, max_moves)
        if only_listed:  # as many as the rule says, but which ones is the reader's choice
            mine = state.owned_by(reader_id)
            listed = sorted((s for s in positions if s in mine), key=lambda s: -mine[s].token)
            chosen = listed[: len(chosen)]
        owned = state.assigned
        triples = tuple((s, owned[s].token, positions.get(s, owned[s].position)) for s in chosen)
        given = epochs or {}
        known = tuple((s, given[s]) for s in chosen if s in positions and s in given)
        update = ReleaseSegments(reader_id, generation, triples, known, lag)
        return ([update] if triples else []), chosen

    return release


def plan_acquire(
    reader_id: str, generation: int, now_ms: int, lag: int = NO_LAG
) -> Plan[list[SegKey]]:
    """Take this reader's whole share of unassigned segments, unless a checkpoint or reset
    awaits this reader (``lag``: the reader's, if reported). Result: the segments acquired."""

    def acquire(state: GroupState) -> Decision[list[SegKey]]:
        check_member(state, reader_id, generation)
        if state.frozen_for(reader_id):
            return [], []
        chosen = segments_to_acquire(state, reader_id)
        update = AcquireSegments(reader_id, generation, tuple(chosen), now_ms, lag)
        return ([update] if chosen else []), chosen

    return acquire


def plan_commit(
    reader_id: str,
    generation: int,
    triples: tuple[tuple[SegKey, int, int], ...],
    epochs: tuple[tuple[SegKey, int], ...] = (),
    lag: int = NO_LAG,
) -> Plan[None]:
    """Record ``(segment, token, position)`` triples (with the epoch each position was read
    under, where ``epochs`` has it, and the reader's ``lag``, if reported); fenced readers get
    an error."""

    def commit(state: GroupState) -> Decision[None]:
        for segment, token, _ in triples:
            check_owner(state, reader_id, generation, segment, token)
        return [CommitPositions(reader_id, generation, triples, epochs, lag)], None

    return commit


def plan_rewind(
    reader_id: str, generation: int, rewinds: tuple[tuple[SegKey, int, int, int], ...]
) -> Plan[None]:
    """Move committed positions back where the log diverged: ``(segment, token, position,
    epoch)`` (see :class:`RewindPositions`); fenced readers get an error."""

    def rewind(state: GroupState) -> Decision[None]:
        for segment, token, _, _ in rewinds:
            check_owner(state, reader_id, generation, segment, token)
        return [RewindPositions(reader_id, generation, rewinds)], None

    return rewind


def plan_complete(
    reader_id: str,
    generation: int,
    completions: tuple[tuple[SegKey, int, int], ...],
    successors: tuple[tuple[SegKey, tuple[SegKey, ...], int], ...],
) -> Plan[bool]:
    """Complete every ``(segment, token, end)`` of ``completions`` (each read to ``end``) in
    one update, unless a checkpoint or reset awaits this reader; every segment must still be
    this reader's under its token. Result: whether they were completed."""

    def complete(state: GroupState) -> Decision[bool]:
        for segment, token, _ in completions:
            check_owner(state, reader_id, generation, segment, token)
        if state.frozen_for(reader_id):
            return [], False
        return [CompleteSegments(reader_id, generation, completions, successors)], True

    return complete


def plan_ack_checkpoint(
    reader_id: str,
    generation: int,
    name: str,
    positions: tuple[tuple[SegKey, int], ...],
    now_ms: int,
) -> Plan[None]:
    def ack(state: GroupState) -> Decision[None]:
        check_member(state, reader_id, generation)
        return [AckCheckpoint(reader_id, generation, name, positions, now_ms)], None

    return ack


def plan_ack_reset(reader_id: str, generation: int, group_generation: int) -> Plan[None]:
    def ack(state: GroupState) -> Decision[None]:
        check_member(state, reader_id, generation)
        return [AckReset(reader_id, generation, group_generation)], None

    return ack
