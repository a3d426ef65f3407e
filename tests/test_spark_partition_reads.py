"""The Spark source's executor-side partition read, run without Spark against a real Redis:
the same rows as the batch client, no transaction, hostile entries as typed errors or decoded,
truncation reported or skipped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import redis

from readergroup import (
    BytesSerializer,
    CorruptSegmentError,
    EventStreamClientFactory,
    StreamManager,
    TruncatedDataError,
)
from readergroup.spark.options import SourceOptions
from readergroup.spark.source import BASE_SCHEMA, SegmentPartition, read_partition


def options(url: str, scope: str, **extra: str) -> SourceOptions:
    return SourceOptions.parse({"redis_url": url, "scope": scope, "stream": "s", **extra})


def rows(batches: Iterator[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    out = []
    for batch in batches:
        assert batch.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
        table = batch.to_pydict()
        micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
        for i in range(batch.num_rows):
            out.append(
                (
                    table["routing_key"][i],
                    table["event"][i],
                    table["segment_id"][i],
                    table["offset"][i],
                    micros[i],
                )
            )
    return out


def write(url: str, scope: str, events: list[tuple[bytes, str | None]]) -> None:
    with (
        EventStreamClientFactory.from_url(scope, url) as factory,
        factory.create_event_writer("s", BytesSerializer()) as writer,
    ):
        for payload, key in events:
            writer.write_event(payload, key)


def commands(client: redis.Redis, name: str) -> int:
    stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


def test_partition_rows_equal_the_batch_clients_events_without_a_transaction(
    redis_url: str, scope: str
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    keyed = [(f"e{i}".encode(), f"k{i % 7}") for i in range(2500)]
    plain = [(f"p{i}".encode(), None) for i in range(1200)]
    mixed = [(f"m{i}".encode(), None if i % 3 else f"k{i}") for i in range(300)]
    write(redis_url, scope, keyed + plain + mixed)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        expected = [
            (e.routing_key, e.payload, e.segment, e.offset, e.writer_ms * 1000)
            for e in factory.create_batch_client().read_events("s")
        ]
    assert len(expected) == 4000
    client = redis.Redis.from_url(redis_url)
    multi, xrange = commands(client, "multi"), commands(client, "xrange")
    got = rows(read_partition(options(redis_url, scope), BASE_SCHEMA, SegmentPartition(0, 0, 3700)))
    assert got == expected[:3700]  # keyed and unkeyed chunks: read as plain XRANGEs
    assert commands(client, "multi") == multi
    assert commands(client, "xrange") - xrange == 4  # 1000 events each
    # the last chunks mix keyed and unkeyed events
    got = rows(read_partition(options(redis_url, scope), BASE_SCHEMA, SegmentPartition(0, 0, 4000)))
    assert got == expected
    assert commands(client, "multi") == multi
    client.close()


def test_foreign_entries_are_decoded_or_typed_errors_never_a_crash(
    redis_url: str, scope: str
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    write(redis_url, scope, [(b"good", "k")] * 3)
    client = redis.Redis.from_url(redis_url)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        meta, events_key, _ = factory.connection.keys.segment(scope, "s", 0)
    # a routing key that is not UTF-8, a garbled writer time, a time out of any range
    client.xadd(events_key, {"k": b"\xff\xfe", "p": b"a", "w": b"x1", "t": 0, "b": 0}, id="4-0")
    client.xadd(events_key, {"k": b"ok", "p": b"b", "w": b"9" * 30, "t": 0, "b": 0}, id="5-0")
    client.xadd(events_key, {"p": b"c"}, id="6-0")  # another shape: decoded by name
    client.hset(meta, "events", 6)
    layout = rows(read_partition(options(redis_url, scope), BASE_SCHEMA, SegmentPartition(0, 0, 5)))
    got = rows(read_partition(options(redis_url, scope), BASE_SCHEMA, SegmentPartition(0, 0, 6)))
    assert layout == got[:5]  # the library's layout (read as is) and another shape (one by one)
    assert [r[:4] for r in got[3:]] == [
        ("\ufffd\ufffd", b"a", 0, 3),
        ("ok", b"b", 0, 4),
        (None, b"c", 0, 5),
    ]
    assert [r[4] for r in got[3:]] == [-1000, -1000, 0]
    # an entry out of sequence: the events before it come, then a typed error naming the key
    client.xadd(events_key, {"p": b"rogue", "w": 0, "t": 0, "b": 0}, id="20-0")
    client.hset(meta, "events", 20)
    batches = read_partition(options(redis_url, scope), BASE_SCHEMA, SegmentPartition(0, 0, 20))
    assert len(rows(iter([next(batches)]))) == 6
    with pytest.raises(CorruptSegmentError, match="after offset 5 has offset 19") as caught:
        next(batches)
    assert events_key in str(caught.value)
    client.close()


def test_truncation_racing_a_partition_read_is_reported_or_skipped(
    redis_url: str, scope: str
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
        write(redis_url, scope, [(f"e{i}".encode(), "k") for i in range(3000)])
        partition = SegmentPartition(0, 0, 3000)  # planned before the truncation
        strict = read_partition(options(redis_url, scope), BASE_SCHEMA, partition)
        lenient = read_partition(
            options(redis_url, scope, fail_on_data_loss="false"), BASE_SCHEMA, partition
        )
        first_strict, first_lenient = next(strict), next(lenient)
        assert first_strict.num_rows == first_lenient.num_rows == 1000
        cut = sm.tail_cut(scope, "s")
        sm.truncate_stream(scope, "s", cut.__class__(scope, "s", {0: 2500}))
    with pytest.raises(TruncatedDataError, match="offset 1000 is below the head 2500"):
        next(strict)
    assert [r[3] for r in rows(lenient)] == list(range(2500, 3000))
