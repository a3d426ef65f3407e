"""The exhaustive small-scope explorer over the pure core (tests/support/explorer.py): every
interleaving holds every invariant, and the explorer does find the bugs of issue 11 when their
fixes are taken out again (mutants), so a green run means something."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from readergroup.admin import group_member
from readergroup.admin.group_member import GroupMember
from readergroup.core import membership
from readergroup.core.group_state import (
    NO_LAG,
    CompleteSegments,
    GroupState,
    SegKey,
    check_owner,
)
from tests.support.explorer import InvariantViolation, Limits, explore

DEADLINE_S = 150.0  # generous on a loaded 2-core machine; typically a third of that


def test_every_interleaving_of_two_readers_keeps_every_invariant() -> None:
    report = explore(Limits(depth=7, readers=2), deadline_s=DEADLINE_S)
    assert report.states > 8_000 and report.transitions > 60_000
    assert report.per_depth[-1] > 0  # the deepest level still found new states


def test_every_interleaving_of_three_readers_keeps_every_invariant() -> None:
    report = explore(Limits(depth=5, readers=3), deadline_s=DEADLINE_S)
    assert report.states > 2_000 and report.transitions > 10_000


def _early_successors(self: CompleteSegments, state: GroupState) -> GroupState:
    """Issue 11 item 2 as it was: a predecessor the group has not reached counts as done."""
    for segment, token, _ in self.completions:
        check_owner(state, self.reader_id, self.generation, segment, token)
    done = {s for s, _, _ in self.completions}
    assigned = {s: a for s, a in state.assigned.items() if s not in done}
    completed = state.completed | done
    live = (set(assigned) | set(state.unassigned) | set(state.future)) - done
    future, unassigned = dict(state.future), dict(state.unassigned)
    for successor, predecessors, start in self.successors:
        if successor in completed or successor in assigned or successor in unassigned:
            continue
        pending = tuple(p for p in predecessors if p in live)
        if successor in future:
            pending = tuple(p for p in future[successor] if p not in done)
        if pending:
            future[successor] = pending
        else:
            future.pop(successor, None)
            unassigned[successor] = start
    return replace(
        state, assigned=assigned, unassigned=unassigned, future=future, completed=completed
    )


def test_the_explorer_finds_a_successor_handed_out_before_its_predecessors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(CompleteSegments, "apply_to", _early_successors)
    with pytest.raises(InvariantViolation, match="successor M assignable") as caught:
        explore(Limits(depth=5, readers=2), deadline_s=DEADLINE_S)
    assert "complete(1)" in str(caught.value)  # 1 completed while 0 (before B) was unread


def _unguarded_complete(
    reader_id: str,
    generation: int,
    segment: SegKey,
    token: int,
    successors: tuple[tuple[SegKey, tuple[SegKey, ...], int], ...],
    end: int,
) -> Any:
    def complete(state: GroupState) -> Any:
        check_owner(state, reader_id, generation, segment, token)
        completions = ((segment, token, end),)
        return [CompleteSegments(reader_id, generation, completions, successors)], True

    return complete


def _frozen_checked_outside(
    self: GroupMember,
    segment: SegKey,
    token: int,
    successors: Sequence[tuple[SegKey, tuple[SegKey, ...], int]],
    end: int = -1,
) -> bool:
    """Issue 11 item 1 as it was: the checkpoint guard outside the re-run generator."""
    if self.refresh().frozen_for(self.reader_id):
        return False
    plan = _unguarded_complete(
        self.reader_id, self.generation, segment, token, tuple(successors), end
    )
    return bool(self.sync.update_state(plan))


def _unguarded_release(
    reader_id: str,
    generation: int,
    max_moves: int,
    positions: Mapping[SegKey, int],
    epochs: Mapping[SegKey, int] | None = None,
    *,
    only_listed: bool = False,
    lag: int = NO_LAG,
) -> Any:
    def release(state: GroupState) -> Any:
        chosen = membership.segments_to_release(state, reader_id, max_moves)
        if only_listed:
            chosen = [s for s in chosen if s in positions]
        owned = state.assigned
        triples = tuple((s, owned[s].token, positions.get(s, owned[s].position)) for s in chosen)
        update = membership.ReleaseSegments(reader_id, generation, triples, (), lag)
        return ([update] if triples else []), chosen

    return release


def test_the_explorer_finds_a_checkpoint_raced_by_a_completion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(GroupMember, "complete", _frozen_checked_outside)
    with pytest.raises(InvariantViolation, match="checkpoint cp0") as caught:
        explore(Limits(depth=5, readers=2, resets=0), deadline_s=DEADLINE_S)
    assert "conflict: admin.checkpoint(cp0) landed first" in str(caught.value)


def test_the_explorer_finds_a_checkpoint_raced_by_a_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = GroupMember.rebalance

    def rebalance(self: GroupMember, positions: Mapping[SegKey, int]) -> Any:
        if self.refresh().frozen_for(self.reader_id):  # the guard outside, as it was
            return {}, []
        return original(self, positions)

    monkeypatch.setattr(group_member, "plan_release", _unguarded_release)
    monkeypatch.setattr(GroupMember, "rebalance", rebalance)
    with pytest.raises(InvariantViolation, match="checkpoint cp0") as caught:
        explore(Limits(depth=5, readers=2, resets=0), deadline_s=DEADLINE_S)
    assert "rebalance [conflict: admin.checkpoint(cp0) landed first]" in str(caught.value)
