"""Lagging readers (issue 30 item 6), pure: the lag a commit reports, its publication by the next
move, the turns it orders (least lag acquires first, most lag releases first) with the fair
shares unchanged, the snapshot form that carries it, and the log formats it travels in."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup.core.balance import segments_to_acquire, segments_to_release
from readergroup.core.fair_share import readers_with_moves
from readergroup.core.group_state import (
    NO_LAG,
    STATE_TYPES,
    UPDATE_TYPES,
    AcquireSegments,
    AddReader,
    CommitPositions,
    CompleteSegments,
    GroupState,
    ReleaseSegments,
    RemoveReader,
    check_invariants,
    readers_to_move,
)
from readergroup.core.lag import events_behind, lag_ranks
from statesync import Update
from statesync.codec import FORMAT_VERSION, Codec, TypeRegistry
from tests.support.group_sim import GroupSimulation
from tests.test_group_pure import balance_round, group, owning, with_readers

IDS = ["r1", "r2", "zeta", "alpha", "b"]


def lagging(state: GroupState, lags: dict[str, int]) -> GroupState:
    """``state`` with ``lags`` reported and published."""
    return replace(state, lag_reports=lags, lags=lags)


def test_the_least_lagging_reader_at_floor_takes_the_extra_segment_whatever_the_ids() -> None:
    """The issue's race: two readers at their floor, one segment freed; the caught-up one takes
    it, in every order of ids (without lags one id won either way); a reader that published no
    lag (a previous version) ranks in the middle."""
    for caught_up, behind in itertools.permutations(IDS, 2):
        state = lagging(owning({caught_up: 1, behind: 1}, 1, ()), {caught_up: 0, behind: 120})
        assert len(segments_to_acquire(state, caught_up)) == 1
        assert segments_to_acquire(state, behind) == []
        assert readers_with_moves(state.counts(), 1, (), state.lags) == {caught_up}
    for old in IDS:  # 3 segments for 3 readers at floor 1, 2 freed: first the caught-up, then old
        others = [r for r in IDS if r != old][:2]
        lags = {others[0]: 0, others[1]: 120}
        state = lagging(owning({old: 1, others[0]: 1, others[1]: 1}, 2, ()), lags)
        assert readers_with_moves(state.counts(), 2, (), state.lags) == {others[0], old}
        assert segments_to_acquire(state, others[1]) == []


def test_the_most_lagging_reader_above_floor_gives_a_segment_up_whatever_the_ids() -> None:
    """A join leaves one reader below its floor: of the donors the counts tie, the one furthest
    behind releases; a reader owning more still goes first (counts decide first)."""
    for caught_up, behind in itertools.permutations(IDS[:4], 2):
        newcomer = next(r for r in IDS if r not in (caught_up, behind))
        counts = {caught_up: 2, behind: 2, newcomer: 0}
        state = lagging(owning(counts, 0, ()), {caught_up: 0, behind: 120})
        assert len(segments_to_release(state, behind, 16)) == 1
        assert segments_to_release(state, caught_up, 16) == []
        assert readers_with_moves(state.counts(), 0, (), state.lags) == {behind}
        counts = {caught_up: 3, behind: 2, newcomer: 0}  # 5 for 3: floor 1, the owner of 3 first
        state = lagging(owning(counts, 0, ()), {caught_up: 0, behind: 120})
        assert readers_with_moves(state.counts(), 0, (), state.lags) == {caught_up}


def test_the_readers_a_move_wakes_are_those_with_a_move_with_lags_too() -> None:
    """``readers_with_moves`` (who a move wakes) agrees with asking each reader the rules, for
    every group of up to 3 readers owning up to 3 each with up to 4 free, a frozen reader or
    none, and every lag among unknown, caught up and behind: a reader left out would miss its
    turn until its next refresh."""
    choices = (None, 0, 120)
    for readers in range(1, 4):
        ids = [f"r{i}" for i in range(readers)]
        for owned, lag_values in itertools.product(
            itertools.product(range(4), repeat=readers),
            itertools.product(choices, repeat=readers),
        ):
            counts = dict(zip(ids, owned, strict=True))
            lags = {r: lag for r, lag in zip(ids, lag_values, strict=True) if lag is not None}
            for unassigned, frozen in itertools.product(range(5), [(), ("r0",)]):
                state = lagging(owning(counts, unassigned, frozen), lags)
                expected = {
                    r
                    for r in ids
                    if r not in frozen
                    and (segments_to_acquire(state, r) or segments_to_release(state, r, 1))
                }
                woken = readers_with_moves(counts, unassigned, frozen, lags)
                assert woken == expected, (counts, unassigned, frozen, lags)


@settings(max_examples=120, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 8),
    st.lists(st.integers(0, 500), min_size=9, max_size=9),
)
def test_lags_change_who_moves_never_how_many(segments: int, readers: int, lags: list[int]) -> None:
    """Balanced with or without lags, every reader ends within one of the others, the same
    counts appear, and a join moves exactly ``S // (N + 1)`` segments, all to the new reader."""
    names = [f"r{i}" for i in range(readers)]
    reported = dict(zip([*names, "new"], lags, strict=False))
    finals = []
    for lagged in (False, True):
        state = with_readers(group(segments), names)
        if lagged:
            state = lagging(state, {r: reported[r] for r in names})
        for _ in range(3 * segments + 10):
            state, moved = balance_round(state, names)
            if not moved:
                break
        counts = state.counts()
        assert not state.unassigned and max(counts.values()) - min(counts.values()) <= 1
        before = {s: a.reader for s, a in state.assigned.items()}
        state = AddReader("new", 0).apply_to(state)
        if lagged:
            state = lagging(state, reported)
        for _ in range(3 * segments + 10):
            state, moved = balance_round(state, [*names, "new"])
            if not moved:
                break
        check_invariants(state)
        changed = {s for s, a in state.assigned.items() if before[s] != a.reader}
        assert len(changed) == segments // (readers + 1)
        assert all(state.assigned[s].reader == "new" for s in changed)
        finals.append(sorted(state.counts().values()))
    assert finals[0] == finals[1]


def test_a_commit_reports_its_lag_and_the_next_move_publishes_it() -> None:
    """Reports change no turn until a move (which wakes the readers with a move to make,
    decided with them) publishes them; a commit without a lag keeps the last report; a
    removed reader's lag goes with it."""
    state = owning({"a": 2, "b": 1}, 1, ())
    gen = {r: state.readers[r].generation for r in state.readers}
    seg_a = next(iter(state.owned_by("a")))
    token = state.assigned[seg_a].token
    state = CommitPositions("a", gen["a"], ((seg_a, token, 3),), (), 120).apply_to(state)
    assert (dict(state.lag_reports), dict(state.lags)) == ({"a": 120}, {})
    state = CommitPositions("a", gen["a"], ((seg_a, token, 4),)).apply_to(state)
    assert dict(state.lag_reports) == {"a": 120}
    free = next(iter(state.unassigned))
    state = AcquireSegments("b", gen["b"], (free,), 0).apply_to(state)
    assert dict(state.lags) == {"a": 120}
    seg_b = free
    token_b = state.assigned[seg_b].token
    state = CommitPositions("b", gen["b"], ((seg_b, token_b, 1),), (), 0).apply_to(state)
    assert dict(state.lags) == {"a": 120}
    state = ReleaseSegments("b", gen["b"], ((seg_b, token_b, 1),)).apply_to(state)
    assert dict(state.lags) == {"a": 120, "b": 0}
    state = CommitPositions("a", gen["a"], ((seg_a, token, 5),), (), 7).apply_to(state)
    state = AddReader("c", 0).apply_to(state)
    assert dict(state.lags) == {"a": 7, "b": 0}
    state = CompleteSegments("a", gen["a"], ((seg_a, token, 9),), ()).apply_to(state)
    state = RemoveReader("a", gen["a"]).apply_to(state)
    assert (dict(state.lag_reports), dict(state.lags)) == ({"b": 0}, {"b": 0})
    check_invariants(state)
    # a move carries its reader's lag, reported and published at once
    state = AcquireSegments("b", gen["b"], (seg_b,), 0, 40).apply_to(state)
    assert (dict(state.lag_reports), dict(state.lags)) == ({"b": 40}, {"b": 40})
    token_b = state.assigned[seg_b].token
    state = ReleaseSegments("b", gen["b"], ((seg_b, token_b, 1),), (), 50).apply_to(state)
    assert (dict(state.lag_reports), dict(state.lags)) == ({"b": 50}, {"b": 50})
    state = AcquireSegments("b", gen["b"], (seg_b,), 0).apply_to(state)  # none: kept
    assert dict(state.lags) == {"b": 50}
    check_invariants(state)


def test_snapshots_carry_the_lags_in_form_3_and_stay_form_2_without() -> None:
    """Replicas that load a snapshot must rank readers as those that applied the log (else two
    could each wait for the other's turn): lags are in the snapshot, in a form written only
    while a lag is known, so a group without lags keeps the form the previous version reads."""
    plain = owning({"a": 2, "b": 1}, 1, ())
    wire = plain.to_wire()
    assert wire[0] == 2 and len(wire) == 19
    state = replace(plain, lag_reports={"a": 120, "b": 3}, lags={"a": 100})
    wire = state.to_wire()
    assert wire[0] == 3 and len(wire) == 20
    back = GroupState.from_wire(wire)
    assert (dict(back.lag_reports), dict(back.lags)) == ({"a": 120, "b": 3}, {"a": 100})
    assert back == state and readers_to_move(back) == readers_to_move(state)
    assert GroupState.from_wire(plain.to_wire()) == plain


@dataclass(frozen=True)
class PreviousCommitPositions(Update):
    """``CommitPositions`` as the previous versions define it (no ``lag``)."""

    type_name = "CommitPositions"
    tagged_fields = frozenset({"epochs"})
    reader_id: str
    generation: int
    positions: tuple[tuple[tuple[str, int], int, int], ...]
    epochs: tuple[tuple[tuple[str, int], int], ...] = ()

    def apply_to(self, state: object) -> object:
        return state


def test_a_commit_without_a_lag_reads_in_versions_that_do_not_know_the_field() -> None:
    """In format 2 (a previous version is a member) a commit leaves ``lag`` out (its default),
    so the previous version, strict about fields, reads it; in format 3 the lag is a tagged
    field, which a reader that does not know it drops."""
    new = Codec(TypeRegistry([*UPDATE_TYPES, *STATE_TYPES]))
    previous = Codec(TypeRegistry([PreviousCommitPositions]))
    commit = CommitPositions("a", 1, ((("s/t", 0), 1, 5),))
    (read,) = previous.decode_entry(1, 0, new.encode_entry("w", [commit], version=2)).updates
    assert read == PreviousCommitPositions("a", 1, ((("s/t", 0), 1, 5),))
    lagged = replace(commit, lag=120)
    payload = new.encode_entry("w", [lagged], version=FORMAT_VERSION)
    (read,) = previous.decode_entry(1, 0, payload).updates
    assert read == PreviousCommitPositions("a", 1, ((("s/t", 0), 1, 5),))
    (back,) = new.decode_entry(1, 0, payload).updates
    assert back == lagged


def test_a_member_reports_its_lag_only_while_every_member_reads_the_newest_format() -> None:
    """A member of a previous version (it announces no format) would refuse the field: while
    one is in the group, commits carry no lag."""
    sim = GroupSimulation(1, segments=4)
    for reader_id in ("a", "b"):
        sim.join(reader_id)
        sim.readers[reader_id].member.rebalance({})
    a = sim.readers["a"].member
    a.rebalance({})
    seg, assignment = next(iter(a.refresh().owned_by("a").items()))
    a.commit({seg: (assignment.token, 1)}, lag=120)
    assert dict(a.refresh().lag_reports) == {"a": 120}
    sim.join("old")
    old = sim.readers["old"].member
    sim.heartbeats.withdraw("old", old.generation)  # a previous version announces nothing
    a.refresh()  # (it has seen the join, as a reader woken by it has)
    a.commit({seg: (assignment.token, 2)}, lag=30)
    assert dict(a.refresh().lag_reports) == {"a": 120}
    assert a.refresh().assigned[seg].position == 2
    old.rebalance({}, lag=7)  # (a previous version would not send one: the format says so)
    a.rebalance({}, lag=30)
    assert dict(a.refresh().lag_reports) == {"a": 120}


def test_lag_ranks_and_events_behind() -> None:
    assert events_behind({"a": 10, "b": 7}, {"a": 130, "b": 5}) == 120
    rank = lag_ranks({"a": 120, "b": 0}, ["a", "b", "old"])
    assert [rank(r) for r in ("a", "b", "old")] == [120, 0, 60]  # the mean: between them
    assert lag_ranks({"gone": 5}, ["a"])("a") == 0  # lags of non-members do not count
    assert NO_LAG < 0
