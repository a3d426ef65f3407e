"""Reader-group core without Redis: fair share, transitions, fencing, and a long simulation."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup.core.balance import (
    acquire_count,
    expired_readers,
    fair_share,
    release_count,
    segments_to_acquire,
    segments_to_release,
)
from readergroup.core.errors import InvalidConfigError, ReaderNotInGroupError, SegmentNotOwnedError
from readergroup.core.fair_share import readers_with_moves
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import (
    AcquireSegments,
    AddReader,
    CommitPositions,
    CompleteSegment,
    GroupState,
    ReaderRecord,
    ReleaseSegments,
    RemoveReader,
    check_invariants,
    check_owner,
    new_group,
)
from tests.support.group_sim import GroupSimulation

S = "s/t"


def group(segments: int) -> GroupState:
    return new_group(
        "s", "g", ReaderGroupConfig(streams=[S]), {(S, i): 0 for i in range(segments)}, 0
    )


def with_readers(state: GroupState, names: list[str]) -> GroupState:
    for name in names:
        state = AddReader(name, 0).apply_to(state)
    return state


def balance_round(state: GroupState, order: list[str], moves: int = 16) -> tuple[GroupState, int]:
    moved = 0
    for name in order:
        if name not in state.readers:
            continue
        generation = state.readers[name].generation
        release = segments_to_release(state, name, moves)
        if release:
            triples = tuple((s, state.assigned[s].token, 5) for s in release)
            state = ReleaseSegments(name, generation, triples).apply_to(state)
            moved += len(release)
        acquire = segments_to_acquire(state, name)
        if acquire:
            state = AcquireSegments(name, generation, tuple(acquire), 0).apply_to(state)
            moved += len(acquire)
        check_invariants(state)
    return state, moved


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 10),
    st.lists(st.integers(0, 9), max_size=60),
    st.randoms(use_true_random=False),
)
def test_fair_share_converges_and_then_stops_moving(
    segments: int, readers: int, extra_joins: list[int], rnd: object
) -> None:
    names = [f"r{i}" for i in range(readers)]
    state = with_readers(group(segments), names)
    for _ in range(3 * segments + 10):
        order = list(names)
        rnd.shuffle(order)  # type: ignore[attr-defined]
        state, moved = balance_round(state, order, moves=rnd.randint(1, 4))  # type: ignore[attr-defined]
        if not moved:
            break
    counts = state.counts()
    assert not state.unassigned
    assert max(counts.values()) - min(counts.values()) <= 1
    assert balance_round(state, names)[1] == 0  # stable: no flapping once balanced


def test_a_joining_reader_gets_its_share_from_the_others() -> None:
    state = with_readers(group(8), ["a", "b", "c", "d"])
    state, _ = balance_round(state, ["a", "b", "c", "d"])
    assert sorted(state.counts().values()) == [2, 2, 2, 2]
    state = AddReader("e", 0).apply_to(state)
    for _ in range(10):
        state, _ = balance_round(state, ["a", "b", "c", "d", "e"])
    counts = state.counts()
    assert sorted(counts.values()) == [1, 1, 2, 2, 2]


def test_a_lone_reader_acquires_its_whole_share_in_one_update() -> None:
    state = with_readers(group(1024), ["a"])
    assert len(segments_to_acquire(state, "a")) == 1024  # bounded by fair share, not moves
    state = with_readers(group(1024), ["a", "b", "c"])
    assert len(segments_to_acquire(state, "a")) == 341  # floor while b and c starve


def test_a_capped_release_rebalances_again_at_once() -> None:
    sim = GroupSimulation(1, segments=64)  # members move at most 4 segments per update
    sim.join("a")
    a = sim.readers["a"].member
    acquired, _ = a.rebalance({})
    assert len(acquired) == 64  # one rebalance, one update: the whole share
    sim.join("b")
    _, released = a.rebalance({})
    assert len(released) == 32  # down to ceil in one rebalance, four segments per update
    acquired, _ = sim.readers["b"].member.rebalance({})
    assert len(acquired) == 32
    check_invariants(sim.state())


def test_share_arithmetic() -> None:
    assert fair_share(0, 3) == (0, 0)
    assert fair_share(7, 0) == (0, 0)
    # 7 segments, 3 readers: floor 2, ceil 3
    assert release_count(3, {"a": 3, "b": 2, "c": 2}, unassigned=0, max_moves=8) == 0  # in band
    assert release_count(3, {"a": 3, "b": 3, "c": 1}, unassigned=0, max_moves=8) == 1  # c < floor
    assert release_count(3, {"a": 3, "b": 3, "c": 1}, unassigned=1, max_moves=8) == 0  # c takes it
    assert release_count(5, {"a": 5, "b": 1, "c": 1}, unassigned=0, max_moves=1) == 1  # bounded
    assert acquire_count(2, {"a": 2, "b": 3, "c": 1}, unassigned=1) == 0  # c first


def test_liveness_is_judged_on_server_time_and_generation() -> None:
    readers = {"a": ReaderRecord("a", 3, 1_000), "b": ReaderRecord("b", 4, 1_000)}
    beats = {"a": (3, 51_000), "b": (2, 59_000)}  # b's beat is from a previous life
    assert expired_readers(readers, beats, 60_500, 10_000) == [("b", 4)]  # a: 9.5 s, fine
    assert expired_readers(readers, beats, 61_001, 10_000) == [("a", 3), ("b", 4)]


def test_fencing_rejects_removed_readers_and_stale_tokens() -> None:
    state = with_readers(group(2), ["a", "b"])
    a = state.readers["a"].generation
    state = AcquireSegments("a", a, ((S, 0), (S, 1)), 0).apply_to(state)
    token = state.assigned[(S, 0)].token
    state = CommitPositions("a", a, (((S, 0), token, 7),)).apply_to(state)
    state = RemoveReader("a", a).apply_to(state)  # declared dead: back at committed positions
    assert state.unassigned == {(S, 0): 7, (S, 1): 0}
    with pytest.raises(ReaderNotInGroupError):
        CommitPositions("a", a, (((S, 0), token, 9),)).apply_to(state)
    b = state.readers["b"].generation
    state = AcquireSegments("b", b, ((S, 0),), 0).apply_to(state)
    new_token = state.assigned[(S, 0)].token
    assert new_token > token  # tokens only grow across owners
    with pytest.raises(SegmentNotOwnedError):
        check_owner(state, "b", b, (S, 0), token)


def test_complete_hands_successors_over_once_all_predecessors_are_done() -> None:
    state = with_readers(group(2), ["a"])
    g = state.readers["a"].generation
    state = AcquireSegments("a", g, ((S, 0), (S, 1)), 0).apply_to(state)
    merged = ((S, 9), ((S, 0), (S, 1)), 0)
    state = CompleteSegment("a", g, (S, 0), state.assigned[(S, 0)].token, (merged,)).apply_to(state)
    assert state.future == {(S, 9): ((S, 1),)} and (S, 0) in state.completed
    state = CompleteSegment("a", g, (S, 1), state.assigned[(S, 1)].token, (merged,)).apply_to(state)
    assert state.future == {} and state.unassigned == {(S, 9): 0}
    check_invariants(state)


def test_positions_never_go_back() -> None:
    state = with_readers(group(1), ["a"])
    g = state.readers["a"].generation
    state = AcquireSegments("a", g, ((S, 0),), 0).apply_to(state)
    t = state.assigned[(S, 0)].token
    state = CommitPositions("a", g, (((S, 0), t, 10),)).apply_to(state)
    state = CommitPositions("a", g, (((S, 0), t, 4),)).apply_to(state)
    assert state.assigned[(S, 0)].position == 10


@pytest.mark.parametrize(
    "kwargs",
    [
        {"streams": []},
        {"streams": "s/t"},
        {"streams": ["s/t", "s/t"]},
        {"streams": ["s/t"], "session_timeout": 5, "heartbeat_interval": 3},
        {"streams": ["s/t"], "commit_mode": "sometimes"},
        {"streams": ["s/t"], "start": "middle"},
        {"streams": ["s/t"], "max_segment_moves": 0},
    ],
)
def test_invalid_group_configs(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidConfigError):
        ReaderGroupConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "seed",
    [1, *(pytest.param(seed, marks=pytest.mark.long) for seed in (2, 3))],  # (test-long: 2, 3)
)
def test_many_reader_simulation_keeps_every_invariant(seed: int) -> None:
    sim = GroupSimulation(seed)
    sim.run(3000)
    final = sim.settle()
    check_invariants(final)
    live = [r for r, s in sim.readers.items() if s.alive]
    assert sorted(final.readers) == sorted(live)
    counts = final.counts()
    assert not final.unassigned
    assert max(counts.values()) - min(counts.values()) <= 1
    assert len(final.completed) > 0  # scaling happened and sealed segments were completed


def test_a_checkpoint_never_completes_before_it_was_created() -> None:
    from readergroup.core.group_state import AckCheckpoint, CreateCheckpoint

    state = with_readers(group(1), ["a"])
    state = CreateCheckpoint("cp", created_ms=5_000).apply_to(state)
    # the acknowledging reader's last heartbeat (its server time) predates the creation
    state = AckCheckpoint("a", state.readers["a"].generation, "cp", (), 4_000).apply_to(state)
    checkpoint = state.checkpoint("cp")
    assert checkpoint is not None and checkpoint.completed_ms == 5_000


def owning(counts: dict[str, int], unassigned: int, frozen: tuple[str, ...]) -> GroupState:
    """A group whose readers own ``counts`` segments each, ``unassigned`` more free, and a
    reset awaiting the ``frozen`` readers."""
    state = with_readers(group(sum(counts.values()) + unassigned), list(counts))
    free = sorted(state.unassigned)
    for name, count in counts.items():
        taken, free = tuple(free[:count]), free[count:]
        if taken:
            generation = state.readers[name].generation
            state = AcquireSegments(name, generation, taken, 0).apply_to(state)
    return replace(state, reset_pending=frozen)


def test_the_readers_a_move_wakes_are_exactly_those_with_a_move_to_make() -> None:
    """``readers_with_moves`` (O(R log R), run by whoever appends a join or move) against
    asking every reader the balancing rules themselves (turns included; a frozen reader moves
    nothing), for every group of up to 4 readers owning up to 3 each with up to 5 unassigned,
    and every frozen reader among the first two: a reader left out would miss a move until its
    next refresh; one named for nothing makes a refresh for nothing (a hundred of them, when
    one reader of a hundred was short)."""
    for readers in range(1, 5):
        ids = [f"r{i}" for i in range(readers)]
        for owned in itertools.product(range(4), repeat=readers):
            counts = dict(zip(ids, owned, strict=True))
            for unassigned, frozen in itertools.product(range(6), [(), ("r0",), ("r1",)]):
                state = owning(counts, unassigned, frozen)
                expected = {
                    r
                    for r in ids
                    if r not in frozen
                    and (segments_to_acquire(state, r) or segments_to_release(state, r, 1))
                }
                assert readers_with_moves(counts, unassigned, frozen) == expected, (
                    counts,
                    unassigned,
                    frozen,
                )
                assert state.frozen_readers() == frozenset(frozen)
