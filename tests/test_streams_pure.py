"""Pure parts of streams: routing, key ranges, metadata transitions, cuts, planning, scaling."""

from __future__ import annotations

import contextlib
import hashlib
import random
from operator import itemgetter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup import (
    InvalidKeyRangesError,
    InvalidNameError,
    InvalidStreamCutError,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
)
from readergroup.admin.autoscale import ScaleAction, plan_scaling
from readergroup.core.errors import InvalidConfigError, ScaleConflictError
from readergroup.core.names import split_scoped_stream, validate_name
from readergroup.core.planning import plan_ranges
from readergroup.core.routing import (
    RangeMap,
    check_exact_cover,
    epoch_of,
    key_position,
    number_of,
    segment_id,
    uniform_ranges,
)
from readergroup.core.stream_metadata import ScaleStream, StreamState, check_scale, initial_state
from statesync.codec import Codec, TypeRegistry


def test_key_positions_are_stable_and_documented() -> None:
    # BLAKE2b-64 of the UTF-8 key over 2**64: fixed forever, whatever the process or version
    digest = hashlib.blake2b(b"customer-7", digest_size=8).digest()
    assert key_position("customer-7") == int.from_bytes(digest, "big") / 2**64
    assert key_position("customer-7") == key_position("customer-7")
    positions = [key_position(f"k{i}") for i in range(10_000)]
    assert all(0 <= p < 1 for p in positions)
    quarters = [sum(1 for p in positions if q / 4 <= p < (q + 1) / 4) for q in range(4)]
    assert min(quarters) > 2200  # spread evenly (expected 2500 each)


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_segment_ids_pack_epoch_and_number(epoch: int, number: int) -> None:
    sid = segment_id(epoch, number)
    assert (epoch_of(sid), number_of(sid)) == (epoch, number)


def test_exact_cover_rules() -> None:
    assert check_exact_cover([(0.5, 1.0), (0.0, 0.5)], [(0.0, 1.0)]) == [(0.0, 0.5), (0.5, 1.0)]
    for bad in ([(0.0, 0.4), (0.5, 1.0)], [(0.0, 0.6), (0.5, 1.0)], [(0.0, 0.9)], [(0.2, 0.2)], []):
        with pytest.raises(InvalidKeyRangesError):
            check_exact_cover(bad, [(0.0, 1.0)])


def test_range_map_routes_to_the_owning_segment() -> None:
    ranges = RangeMap([(10, 0.0, 0.25), (11, 0.25, 0.5), (12, 0.5, 1.0)])
    assert [ranges.segment_at(p) for p in (0.0, 0.2499, 0.25, 0.7, 0.99999)] == [10, 10, 11, 12, 12]


def test_range_map_groups_items_by_segment_in_their_order() -> None:
    ranges = RangeMap([(10, 0.0, 0.25), (11, 0.25, 0.5), (12, 0.5, 1.0)])
    items = [(0.7, "a"), (0.1, "b"), (0.8, "c"), (0.3, "d"), (0.2, "e")]
    grouped = ranges.group(items, itemgetter(0))
    assert grouped == {12: [items[0], items[2]], 10: [items[1], items[4]], 11: [items[3]]}
    assert ranges.group([], itemgetter(0)) == {}


def test_range_map_of_one_segment_groups_without_looking_at_positions() -> None:
    items = [(0.7, "a"), (0.1, "b")]

    def never(item: tuple[float, str]) -> float:
        raise AssertionError(f"position of {item} looked at")

    grouped = RangeMap([(4, 0.0, 1.0)]).group(items, never)
    assert grouped == {4: items} and grouped[4] is items  # handed over whole, not copied


@pytest.mark.parametrize("name", ["", "a/b", "a:b", "-a", "a b", "x" * 65, "ü"])
def test_bad_names(name: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_name(name, "stream")


def test_scoped_stream_parsing() -> None:
    assert split_scoped_stream("shop/orders", None) == ("shop", "orders")
    assert split_scoped_stream("orders", "shop") == ("shop", "orders")
    with pytest.raises(InvalidNameError):
        split_scoped_stream("orders", None)


def test_configs_validate() -> None:
    with pytest.raises(InvalidConfigError):
        StreamConfiguration(max_event_size=8 * 1024 * 1024 + 1)
    with pytest.raises(InvalidConfigError):
        ScalingPolicy.fixed(0)
    with pytest.raises(InvalidConfigError):
        ScalingPolicy.by_event_rate(0)
    assert StreamConfiguration(max_event_size=8 * 1024 * 1024).max_event_size == 8 * 1024 * 1024


def fresh(segments: int = 2) -> StreamState:
    return initial_state(
        "s", "t", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments)), 0
    )


def check_invariants(state: StreamState) -> None:
    active = state.active_segments
    if not state.sealed:
        check_exact_cover([(r.low, r.high) for r in active], [(0.0, 1.0)])
    for record in state.segments.values():
        for succ in record.successors:
            assert record.segment_id in state.segments[succ].predecessors
        for pred in record.predecessors:
            assert record.segment_id in state.segments[pred].successors
    assert {r.segment_id for r in active} == set(state.epochs[-1].segments)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.integers(2, 4)), max_size=12))
def test_random_scales_keep_every_invariant(steps: list[tuple[bool, int, int]]) -> None:
    state = fresh()
    codec = Codec(
        TypeRegistry(
            [
                *__import__("readergroup.core.stream_metadata", fromlist=["x"]).STATE_TYPES,
                ScaleStream,
            ]
        )
    )
    for split, pick, factor in steps:
        active = state.active_segments
        if split or len(active) < 2:
            record = active[pick % len(active)]
            sealed, ranges = (record.segment_id,), uniform_ranges(factor, record.low, record.high)
        else:
            i = pick % (len(active) - 1)
            sealed = (active[i].segment_id, active[i + 1].segment_id)
            ranges = [(active[i].low, active[i + 1].high)]
        update = ScaleStream(state.epoch + 1, sealed, tuple(ranges), state.epoch + 1)
        state = update.apply_to(state)
        check_invariants(state)
        assert codec.decode_value(codec.encode_value(state)) == state  # it survives the log


def test_scale_validation_errors() -> None:
    state = fresh()
    with pytest.raises(InvalidKeyRangesError):
        check_scale(state, [0], [(0.0, 0.2), (0.3, 0.5)])
    with pytest.raises(ScaleConflictError):
        check_scale(state, [99], [(0.0, 0.5)])


def test_plan_ranges_across_a_split_and_a_merge() -> None:
    state = fresh(2)  # segments 0 [0,.5) and 1 [.5,1)
    state = ScaleStream(1, (0,), ((0.0, 0.25), (0.25, 0.5)), 1).apply_to(state)
    a, b = segment_id(1, 2), segment_id(1, 3)
    state = ScaleStream(2, (b, 1), ((0.25, 1.0),), 2).apply_to(state)
    m = segment_id(2, 4)
    tails = {0: 5, 1: 6, a: 7, b: 8, m: 9}
    plan = plan_ranges(state, {0: 1, 1: 0}, None, tails)
    order = [r.segment for r in plan]
    assert set(order) == {0, 1, a, b, m}
    assert order.index(m) > max(order.index(b), order.index(1))  # a merge follows both parents
    assert order.index(a) > order.index(0)
    assert {r.segment: (r.start, r.end) for r in plan}[0] == (1, 5)
    # an end cut at the split successors stops before the merge
    bounded = plan_ranges(state, {0: 0, 1: 0}, {a: 3, b: 4, 1: 6}, tails)
    assert {r.segment: (r.start, r.end) for r in bounded} == {
        0: (0, 5),
        1: (0, 6),
        a: (0, 3),
        b: (0, 4),
    }


def test_stream_cut_text_form() -> None:
    cut = StreamCut("shop", "orders", {4294967298: 7, 0: 15, 1: 0})
    assert cut.to_text() == "rgcut1:shop/orders:0=15,1=0,4294967298=7"
    assert StreamCut.from_text(cut.to_text()) == cut


@given(st.dictionaries(st.integers(0, 2**63), st.integers(0, 2**40), min_size=1, max_size=8))
def test_stream_cuts_round_trip(positions: dict[int, int]) -> None:
    cut = StreamCut("a", "b", positions)
    assert StreamCut.from_text(str(cut)) == cut


@given(st.text(max_size=60))
def test_garbage_stream_cut_text_is_a_specific_error(text: str) -> None:
    with contextlib.suppress(InvalidStreamCutError):
        StreamCut.from_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "rgcut1:shop/orders:",
        "rgcut2:a/b:0=1",
        "rgcut1:a/b:0=1,0=2",
        "rgcut1:a b/c:0=1",
        "rgcut1:a/b:x=1",
    ],
)
def test_bad_stream_cut_texts(text: str) -> None:
    with pytest.raises(InvalidStreamCutError):
        StreamCut.from_text(text)


def test_autoscale_decisions() -> None:
    policy = ScalingPolicy.by_event_rate(target_rate=100, scale_factor=3, min_segments=2)
    segs = [(1, 0.0, 0.5), (2, 0.5, 1.0)]
    assert plan_scaling(policy, segs, {1: 500, 2: 200}) == ScaleAction(
        "split", (1,), tuple(uniform_ranges(3, 0.0, 0.5))
    )
    assert plan_scaling(policy, segs, {1: 1, 2: 1}) is None  # min_segments holds
    assert plan_scaling(ScalingPolicy.fixed(2), segs, {1: 10_000}) is None
    rng = random.Random(1)
    three = [(1, 0.0, 0.3), (2, 0.3, 0.6), (3, 0.6, 1.0)]
    action = plan_scaling(policy, three, {1: 40, 2: 10 + rng.random(), 3: 5})
    assert action == ScaleAction("merge", (2, 3), ((0.3, 1.0),))
