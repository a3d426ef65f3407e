"""Spark partition planning at many segments (issue 15): segments with data are packed into at
most ``max_partitions`` input partitions (one task per segment made a ``count()`` over 10,000
segments take minutes); empty segments cost nothing; every event is read exactly once and a
segment's events keep their order within its partition."""

from __future__ import annotations

import random
from typing import Any

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.spark.options import PartitionSpec, pack_partitions


def test_packing_bounds_the_partitions_and_keeps_every_spec_once_in_order() -> None:
    rng = random.Random(5)
    for _ in range(300):
        specs = [PartitionSpec(s, 0, rng.randint(1, 50)) for s in range(rng.randint(0, 400))]
        most, max_events = rng.randint(1, 40), rng.randint(50, 400)
        packed = pack_partitions(specs, most, max_events)
        assert [spec for part in packed for spec in part] == specs  # each once, in order
        assert all(part for part in packed)
        assert all(
            sum(p.end - p.start for p in part) <= max_events for part in packed if len(part) > 1
        )
        total = sum(p.end - p.start for p in specs)
        if len(specs) <= most:
            assert len(packed) == len(specs)
        elif total <= most * max_events // 2:  # the event bound cannot be what splits them
            assert len(packed) <= most, (len(specs), most, max_events, total)


def test_a_count_over_many_segments_uses_bounded_partitions(
    spark: Any, redis_url: str, scope: str
) -> None:
    """200 segments, 150 of them with events: at most 8 tasks, every event once, and each
    segment read in one partition in offset order."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(
            scope, "many", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(200))
        )
        routing = sm.stream_state(scope, "many").range_map()
    keys: dict[int, str] = {}
    for i in range(20_000):
        keys.setdefault(routing.segment_for_key(f"k{i}"), f"k{i}")
        if len(keys) == 200:
            break
    written: dict[int, int] = {}
    with (
        EventStreamClientFactory.from_url(scope, redis_url) as factory,
        factory.create_event_writer("many", BytesSerializer()) as writer,
    ):
        for segment, key in sorted(keys.items())[:150]:
            count = 1 + segment % 4
            for n in range(count):
                writer.write_event(b"%d" % n, routing_key=key)
            written[segment] = count
    df = (
        spark.read.format("readergroup")
        .option("redis_url", redis_url)
        .option("scope", scope)
        .option("stream", "many")
        .option("max_partitions", "8")
        .load()
    )
    assert df.rdd.getNumPartitions() <= 8  # was one per segment with events: 150
    seen = df.rdd.mapPartitionsWithIndex(
        lambda index, rows: [(index, r.segment_id, r.offset, r.event) for r in rows]
    ).collect()
    assert len(seen) == sum(written.values()) == len({(s, o) for _, s, o, _ in seen})
    by_segment: dict[int, list[tuple[int, int, bytes]]] = {}
    for index, segment, offset, event in seen:
        by_segment.setdefault(segment, []).append((index, offset, bytes(event)))
    assert {s: len(v) for s, v in by_segment.items()} == written
    for rows in by_segment.values():
        assert len({index for index, _, _ in rows}) == 1  # one partition per segment here
        assert [offset for _, offset, _ in rows] == sorted(offset for _, offset, _ in rows)
        assert [event for _, _, event in rows] == [b"%d" % n for n in range(len(rows))]
    assert df.count() == sum(written.values())
