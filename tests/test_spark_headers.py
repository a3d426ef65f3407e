"""Event headers (issue 30 item 7) in the Spark source (the ``headers`` column, option
``include_headers``) and sink (an optional ``headers`` column), on a real Redis and, for the
data source itself, a real local SparkSession."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
import redis

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ScalingPolicy,
    SerializationError,
    StreamConfiguration,
    StreamManager,
)
from readergroup.core.headers import encode_headers
from readergroup.spark.options import SourceOptions
from readergroup.spark.source import (
    BASE_SCHEMA,
    HEADERS_FIELD,
    SegmentPartition,
    _Stager,
    read_partition,
)
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch
from readergroup.storage.staging_store import StagedEvent

SCHEMA = BASE_SCHEMA.add(HEADERS_FIELD)


def headers_of(i: int) -> dict[str, bytes]:
    return {} if i % 3 == 0 else {"n": b"%d" % i, "kind": b"odd" if i % 2 else b"even"}


def write(url: str, scope: str, count: int) -> list[Any]:
    """``count`` events, keyed and not, some with headers; return them as stored."""
    with StreamManager.from_url(url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    with EventStreamClientFactory.from_url(scope, url) as factory:
        with factory.create_event_writer("s", BytesSerializer()) as writer:
            for i in range(count):
                key = None if i % 4 == 1 else f"k{i % 5}"
                writer.write_event(b"e%d" % i, key, headers=headers_of(i))
        return list(factory.create_batch_client().read_events("s"))


def options(url: str, scope: str, **extra: str) -> SourceOptions:
    return SourceOptions.parse({"redis_url": url, "scope": scope, "stream": "s", **extra})


def test_the_partition_read_fills_the_headers_column(redis_url: str, scope: str) -> None:
    """Chunks mixing every layout (keyed or not, with headers or not) read on the fast path
    (plain XRANGE, no MULTI) into the same rows as the batch client, headers included."""
    stored = write(redis_url, scope, 1500)
    client = redis.Redis.from_url(redis_url)
    multi = int(client.info("commandstats").get("cmdstat_multi", {}).get("calls", 0))
    got = []
    for batch in read_partition(
        options(redis_url, scope, include_headers="true"), SCHEMA, SegmentPartition(0, 0, 1500)
    ):
        kind = batch.schema.field("headers").type
        assert (kind.key_type, kind.item_type) == (pa.string(), pa.binary())
        table = batch.to_pydict()
        for key, event, headers in zip(
            table["routing_key"], table["event"], table["headers"], strict=True
        ):
            got.append((key, event, dict(headers)))
    assert int(client.info("commandstats").get("cmdstat_multi", {}).get("calls", 0)) == multi
    client.close()
    assert got == [(e.routing_key, e.payload, dict(e.headers)) for e in stored]
    assert sum(1 for _, _, headers in got if headers) == 1000


def test_garbled_stored_headers_are_a_typed_error_naming_the_event(
    redis_url: str, scope: str
) -> None:
    write(redis_url, scope, 3)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        garbled = AppendBatch.of(scope, "s", 0, "other", 1, [(None, b"x", 1, b"\xc1")], 1 << 20)
        assert factory.connection.segments.append([garbled])[0].first_offset == 3
    partition = SegmentPartition(0, 0, 4)
    with pytest.raises(SerializationError, match="segment 0 offset 3"):
        list(read_partition(options(redis_url, scope, include_headers="true"), SCHEMA, partition))
    # without the column, the headers are never decoded
    assert (
        sum(b.num_rows for b in read_partition(options(redis_url, scope), BASE_SCHEMA, partition))
        == 4
    )


@pytest.mark.slow
def test_spark_reads_the_headers_column_and_the_sink_writes_it(
    spark: Any, redis_url: str, scope: str
) -> None:
    stored = write(redis_url, scope, 60)
    base = {"redis_url": redis_url, "scope": scope, "stream": "s"}
    plain = spark.read.format("readergroup").options(**base).load()
    assert "headers" not in plain.columns  # the column is asked for, as Kafka's includeHeaders
    df = spark.read.format("readergroup").options(**base, include_headers="true").load()
    assert df.columns == ["routing_key", "event", "segment_id", "offset", "timestamp", "headers"]
    rows = sorted(df.collect(), key=lambda row: row.offset)
    assert [dict(r.headers) for r in rows] == [dict(e.headers) for e in stored]
    # the sink: a headers column (map<string, binary>) goes with each event
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "sink", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
    sink = {**base, "stream": "sink"}
    df.select("routing_key", "event", "headers").write.format("readergroup").options(**sink).mode(
        "append"
    ).save()
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        written = list(factory.create_batch_client().read_events("sink"))
    assert sorted((e.payload, sorted(e.headers.items())) for e in written) == sorted(
        (e.payload, sorted(e.headers.items())) for e in stored
    )
    # a bad header fails the write in the task that stages it, naming the header
    with pytest.raises(SerializationError, match="header key ''"):
        _Stager(SourceOptions.parse(sink), "job").stage(
            iter([{"routing_key": "k", "event": b"x", "headers": {"": b"v"}}])
        )


def test_staged_events_keep_their_headers_and_old_staging_lists_still_commit(
    redis_url: str, scope: str
) -> None:
    """The sink's staging lists (and its re-staging after a scale): an event with headers
    takes four items, one without three, as before headers existed; a list staged in the
    old layout commits unchanged."""
    write(redis_url, scope, 0)
    staged: list[StagedEvent] = [
        ("a", b"p0", 1, b""),
        (None, b"p1", 2, pack({"x": b"1"})),
        ("hk", b"p2", 3, pack({"y": b""})),
        (None, b"p3", 4, b""),
    ]
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        connection = factory.connection
        assert isinstance(connection, RedisConnection)
        staging = connection.staging
        new_list = staging.staging_key(scope, "s", "job", 0, "new")
        staging.stage(new_list, staged, 60)
        assert staging.read_staged(new_list) == staged
        old_list = staging.staging_key(scope, "s", "job", 0, "old")
        with redis.Redis.from_url(redis_url) as client:
            client.rpush(old_list, "kold", b"p4", 5, "", b"p5", 6)  # as 26dd67a stages
        assert staging.read_staged(old_list) == [("old", b"p4", 5, b""), (None, b"p5", 6, b"")]
        assert staging.commit_staged(scope, "s", "job", [(0, new_list), (0, old_list)]) == (0, 6)
        events = list(factory.create_batch_client().read_events("s"))
        events_key = factory.connection.keys.segment(scope, "s", 0).events
    assert [(e.routing_key, e.payload, e.writer_ms, dict(e.headers)) for e in events] == [
        ("a", b"p0", 1, {}),
        (None, b"p1", 2, {"x": b"1"}),
        ("hk", b"p2", 3, {"y": b""}),
        (None, b"p3", 4, {}),
        ("old", b"p4", 5, {}),
        (None, b"p5", 6, {}),
    ]
    with redis.Redis.from_url(redis_url) as client:
        names = [list(fields) for _, fields in client.xrange(events_key, "-", "+")]
    assert names[:3] == [
        [b"k", b"p", b"w", b"t", b"b"],
        [b"h", b"p", b"w", b"t", b"b"],
        [b"k", b"h", b"p", b"w", b"t", b"b"],
    ]


def pack(headers: dict[str, bytes]) -> bytes:
    return encode_headers(headers, "a test event")
