"""Streams of more than 1,024 segments (issue 15): created, scaled, and a merge of thousands
of segments completed by a reader group in a bounded number of group-log entries."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.segment_cap_bench import one_key_per_segment
from readergroup import (
    EventStreamClientFactory,
    EventWriterConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.core import planning
from readergroup.core.errors import InvalidConfigError, InvalidKeyRangesError
from readergroup.core.group_state import (
    AcquireSegments,
    AddReader,
    CompleteSegment,
    CompleteSegments,
    GroupState,
    SegKey,
    check_invariants,
    new_group,
)
from readergroup.core.stream_config import MAX_SEGMENTS
from readergroup.core.stream_metadata import (
    ScaleStream,
    StreamState,
    check_scale,
    initial_state,
)
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.support.waiting import wait_until
from tests.test_client_suite import HeldLinger

SEGMENTS = 2_000
FAST = {"heartbeat_interval": 0.2, "session_timeout": 3.0, "group_refresh_time": 0.1}


def _uniform(count: int) -> list[tuple[float, float]]:
    return [(i / count, (i + 1) / count) for i in range(count)]


def test_the_cap_is_at_least_ten_thousand_segments() -> None:
    assert MAX_SEGMENTS >= 10_000
    assert ScalingPolicy.fixed(MAX_SEGMENTS).min_segments == MAX_SEGMENTS
    with pytest.raises(InvalidConfigError, match=f"1..{MAX_SEGMENTS}"):
        ScalingPolicy.fixed(MAX_SEGMENTS + 1)


def test_a_stream_of_more_than_1024_segments_is_created_split_and_merged(
    private_redis: LocalRedisServer,
) -> None:
    # a server of its own: the test counts WATCH calls, which other tests' threads also send
    redis_url, scope = private_redis.url, "big-scope"
    with StreamManager.from_url(redis_url) as sm:
        sm.create_scope(scope)
        config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(SEGMENTS))
        assert sm.create_stream(scope, "big", config)
        info = sm.get_stream_info(scope, "big")
        assert len(info.active_segments) == SEGMENTS
        merged = sm.scale_stream(scope, "big", list(range(SEGMENTS)), [(0.0, 1.0)])
        assert len(merged) == 1
        split = sm.scale_stream(scope, "big", merged, _uniform(SEGMENTS))
        assert len(split) == SEGMENTS
        info = sm.get_stream_info(scope, "big")
        assert sorted(s.segment_id for s in info.active_segments) == sorted(split)
        assert not any(s.sealed for s in info.active_segments)
        states = sm.segment_states(scope, "big", list(range(SEGMENTS)) + merged)
        assert all(state.sealed for state in states.values())  # every predecessor sealed
    ranges = [(s.low, s.high) for s in info.active_segments]
    keys = one_key_per_segment(ranges)  # one event to every segment, in one writer round
    client = redis.Redis.from_url(redis_url)
    watches = _calls(client, "watch")
    # the sender's linger lasts until every event is queued: with none, it took whatever was
    # queued, and on a loaded machine (a slow test thread) rounds of 64 to 256 segments went
    # natively, WATCH and all
    held = HeldLinger()
    with (
        EventStreamClientFactory.from_url(scope, redis_url) as factory,
        factory.create_event_writer(
            "big", UTF8StringSerializer(), EventWriterConfig(linger=0.001), clock=held
        ) as writer,
    ):
        futures = [writer.write_event(f"e{i}", routing_key=key) for i, key in enumerate(keys)]
        held.released.set()  # the sender's one round takes them all
        writer.flush()
        assert {f.result(0).segment for f in futures} == set(split)
    # a native round WATCHes three keys per segment and Redis's WATCH is O(watched) per key:
    # over thousands of segments that blocked the server for seconds; such rounds take the script
    assert _calls(client, "watch") == watches
    with StreamManager.from_url(redis_url) as sm:
        assert sm.get_stream_info(scope, "big").events == SEGMENTS
    client.close()


def _calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def test_a_merge_of_2000_segments_completes_in_a_few_group_log_entries(
    redis_url: str, scope: str
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(SEGMENTS))
        sm.create_stream(scope, "big", config)
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/big"], **FAST))
        group = rgm.get_reader_group("g")
        with EventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader = factory.create_reader("r", "g", UTF8StringSerializer())

            def owned() -> int:
                reader.read_next_event(timeout=0.05)
                return sum(map(len, group.get_segment_distribution().assigned.values()))

            wait_until(lambda: owned() == SEGMENTS, timeout=60, what="the reader owns all")
            before = group.sync.revision
            with StreamManager.from_url(redis_url) as sm:
                (merged,) = sm.scale_stream(scope, "big", list(range(SEGMENTS)), [(0.0, 1.0)])

            def completed() -> bool:
                reader.read_next_event(timeout=0.05)
                distribution = group.get_segment_distribution()
                owned = sum(map(len, distribution.assigned.values()))
                return distribution.completed == SEGMENTS and owned == 1

            wait_until(completed, timeout=60, what="every merged segment completed")
            group.sync.fetch_updates()
            entries = group.sync.revision - before
            assert entries <= 6, f"{entries} group-log entries for one merge"
            state = group.sync.state
            assert state.assigned[(f"{scope}/big", merged)].reader == "r"
            # the reader's round-robin forgets completed segments (it kept all 2,000, and
            # looked through them on every segment it adopted: O(S^2) at 10,000)
            assert len(reader._fetcher._rotation) <= 16
            reader.close()


@settings(max_examples=60, deadline=None)
@given(
    segments=st.integers(2, 12),
    cuts=st.lists(st.integers(1, 11), max_size=4),
    done=st.lists(st.booleans(), min_size=12, max_size=12),
    earlier=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_one_batched_completion_is_the_same_as_completing_one_by_one(
    segments: int, cuts: list[int], done: list[bool], earlier: list[bool]
) -> None:
    """Merges of neighbours (0..n-1 into runs split at ``cuts``): completing some segments
    one by one, then the rest of ``done`` in one update, gives the state completing all of
    them one by one gives."""
    stream = "s/t"
    bounds = sorted({c for c in cuts if c < segments} | {0, segments})
    merged = {  # successor 100 + i merges segments bounds[i]..bounds[i + 1] - 1
        (stream, 100 + i): tuple((stream, p) for p in range(low, high))
        for i, (low, high) in enumerate(itertools.pairwise(bounds))
    }
    successor_of = {p: m for m, preds in merged.items() for p in preds}
    config = ReaderGroupConfig(streams=[stream])
    state = new_group("s", "g", config, {(stream, i): 0 for i in range(segments)}, 0)
    state = AddReader("a", 0).apply_to(state)
    generation = state.readers["a"].generation
    state = AcquireSegments("a", generation, tuple(sorted(state.unassigned)), 0).apply_to(state)
    first = [(stream, i) for i in range(segments) if done[i] and earlier[i]]
    rest = [(stream, i) for i in range(segments) if done[i] and not earlier[i]]

    def single(state: GroupState, segment: SegKey) -> GroupState:
        succ = successor_of[segment]
        token = state.assigned[segment].token
        update = CompleteSegment("a", generation, segment, token, ((succ, merged[succ], 7),))
        return replace(update, end=segment[1]).apply_to(state)

    for segment in first:
        state = single(state, segment)
    one_by_one = state
    for segment in rest:
        one_by_one = single(one_by_one, segment)
    completions = tuple((s, state.assigned[s].token, s[1]) for s in rest)
    successors = tuple((m, merged[m], 7) for m in sorted({successor_of[s] for s in rest}))
    batched = CompleteSegments("a", generation, completions, successors).apply_to(state)
    check_invariants(batched)
    assert batched.assigned == one_by_one.assigned
    assert batched.unassigned == one_by_one.unassigned
    assert batched.completed == one_by_one.completed
    assert {m: set(p) for m, p in batched.future.items()} == {
        m: set(p) for m, p in one_by_one.future.items()
    }
    assert batched.waiting_ends == one_by_one.waiting_ends
    keys = set(CompleteSegments("a", generation, completions, successors).conflict_keys())
    assert keys == {
        "r:a",
        *(f"s:{stream}/{s[1]}" for s in rest),
        *(f"s:{stream}/{m[1]}" for m, _, _ in successors),
    }


def test_a_scale_past_the_cap_is_refused_before_anything_changes() -> None:
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(MAX_SEGMENTS))
    state = initial_state("s", "t", config, 0)
    record = state.segments[0]
    middle = (record.low + record.high) / 2
    halves = [(record.low, middle), (middle, record.high)]
    with pytest.raises(InvalidKeyRangesError, match=f"{MAX_SEGMENTS + 1} active segments"):
        check_scale(state, [0], halves)
    merged = ScaleStream(1, (0, 1), ((0.0, state.segments[1].high),), 0).apply_to(state)
    assert len(merged.active_segments) == MAX_SEGMENTS - 1
    third = merged.segments[2]
    middle = (third.low + third.high) / 2
    split = check_scale(merged, [2], [(third.low, middle), (middle, third.high)])  # back to the cap
    assert len(split) == 2


def test_a_time_cut_past_a_merge_of_thousands_walks_the_merge_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``time_positions`` walked a scale's links again for every predecessor it passed:
    O(S^2) for a merge of S segments (205 s at 10,000)."""
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(SEGMENTS))
    state = initial_state("s", "t", config, 0)
    state = ScaleStream(1, tuple(range(SEGMENTS)), ((0.0, 1.0),), 0).apply_to(state)
    (merged,) = [r.segment_id for r in state.active_segments]
    walks: list[int] = []
    original = planning.scale_group

    def counted(state: StreamState, segment: int) -> tuple[set[int], set[int]]:
        walks.append(segment)
        return original(state, segment)

    monkeypatch.setattr(planning, "scale_group", counted)
    # every predecessor's events are older than the time, the merged segment holds newer ones
    cut = planning.time_positions(state, lambda s: (0, 3) if s == merged else (5, 5))
    assert cut == {merged: 0}
    assert len(walks) == 1


class _CountedLinks(tuple[int, ...]):
    """A merge's predecessor links that count how often they are looked through."""

    walks = 0

    def __iter__(self) -> Iterator[int]:
        _CountedLinks.walks += 1
        return super().__iter__()


def test_the_siblings_a_cut_leaves_out_of_a_merge_of_thousands_are_found_in_linear_time() -> None:
    """``completed_merge_siblings`` (the Spark source's checkpointed cuts) looked through the
    merge's predecessors again for every segment of the cut: O(S^2), 11 s at 10,000."""
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(SEGMENTS))
    state = initial_state("s", "t", config, 0)
    state = ScaleStream(1, tuple(range(SEGMENTS)), ((0.0, 1.0),), 0).apply_to(state)
    (merged,) = state.active_segments
    counted = replace(merged, predecessors=_CountedLinks(merged.predecessors))
    state = replace(state, segments={**state.segments, merged.segment_id: counted})
    cut = dict.fromkeys(range(0, SEGMENTS, 2), 2)  # half the predecessors are still being read
    _CountedLinks.walks = 0
    assert planning.completed_merge_siblings(state, cut) == set(range(1, SEGMENTS, 2))
    assert _CountedLinks.walks <= 2
