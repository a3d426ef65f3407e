"""The readergroup Spark data source with a real local SparkSession and a real Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    JsonSerializer,
    ReaderGroupConfig,
    ReaderGroupManager,
    RetentionManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    UTF8StringSerializer,
    acl,
)
from readergroup.spark.executor_readers import run_executor_readers
from readergroup.spark.options import SourceOptions, decode_offset, encode_offset, limited_end
from readergroup.stream_metadata import ScaleStream, initial_state

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def events(redis_url: str, scope: str) -> Iterator[dict[str, Any]]:
    """1500 JSON events on a 2-segment stream that splits after the first 1000."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(
            scope, "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))
        )
        with EventStreamClientFactory.from_url(scope, redis_url) as f:
            writer = f.create_event_writer("orders", JsonSerializer())
            for i in range(1000):
                writer.write_event({"amount": i, "n": i}, routing_key=f"c{i % 7}")
            writer.flush()
            split = sm.scale_stream(scope, "orders", [0], [(0.0, 0.25), (0.25, 0.5)])
            for i in range(1000, 1500):
                writer.write_event({"amount": i, "n": i}, routing_key=f"c{i % 7}")
            writer.close()
        yield {"scope": scope, "url": redis_url, "split": split, "count": 1500}


def source(spark: Any, e: dict[str, Any], **options: str) -> Any:
    reader = spark.read.format("readergroup").option("redis_url", e["url"])
    reader = reader.option("scope", e["scope"]).option("stream", "orders")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def test_the_documented_batch_usage(spark: Any, events: dict[str, Any]) -> None:
    df = (
        spark.read.format("readergroup")
        .option("redis_url", events["url"])
        .option("scope", events["scope"])
        .option("stream", "orders")
        .load()
    )
    assert df.columns == ["routing_key", "event", "segment_id", "offset", "timestamp"]
    rows = df.collect()
    assert len(rows) == 1500 == len({(r.segment_id, r.offset) for r in rows})
    assert {r.segment_id for r in rows} == {0, 1, *events["split"]}  # across the split


def test_json_columns_partitions_and_cuts(spark: Any, events: dict[str, Any]) -> None:
    df = source(
        spark, events, serializer="json", max_events_per_partition="200", min_partitions="4"
    )
    df = df.schema("routing_key string, offset long, amount int, n int").load()
    assert df.rdd.getNumPartitions() >= 8
    assert df.groupBy().sum("amount").collect()[0][0] == sum(range(1500))
    with StreamManager.from_url(events["url"]) as sm:
        middle = sm.tail_cut(events["scope"], "orders")
    bounded = source(spark, events, end_stream_cut=str(middle)).load()
    assert bounded.count() == 1500
    after = source(spark, events, start_stream_cut="latest").load()
    assert after.count() == 0


def test_bad_options_are_clear(spark: Any, events: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="needs options"):
        spark.read.format("readergroup").option("scope", "x").load().count()
    with pytest.raises(Exception, match="not a stream cut"):
        source(spark, events, start_stream_cut="garbage").load().count()
    with pytest.raises(Exception, match="serializer=json needs a schema"):
        source(spark, events, serializer="json").load()


def test_truncated_data_fails_unless_allowed(spark: Any, events: dict[str, Any]) -> None:
    with StreamManager.from_url(events["url"]) as sm:
        head = sm.head_cut(events["scope"], "orders")
        tail = sm.tail_cut(events["scope"], "orders")
        sm.truncate_stream(events["scope"], "orders", tail)
    stale = source(spark, events, start_stream_cut=str(head)).load()
    with pytest.raises(
        Exception, match=r"deleted segment; that data was truncated.*fail_on_data_loss"
    ):
        stale.count()
    lenient = source(spark, events, start_stream_cut=str(head), fail_on_data_loss="false").load()
    assert lenient.count() == 0  # everything before the tail was deleted: skipped, not failed


def test_offsets_are_canonical_and_limits_respect_predecessors() -> None:
    cut = StreamCut("a", "b", {5: 1, 0: 2})
    assert decode_offset(encode_offset(cut)) == cut
    assert list(encode_offset(cut)["positions"]) == ["0", "5"]
    state = initial_state("a", "b", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)), 0)
    state = ScaleStream(1, (0,), ((0.0, 0.5), (0.5, 1.0)), 0).apply_to(state)
    from readergroup.planning import plan_ranges

    ranges = plan_ranges(state, {0: 0}, None, {0: 10, 4294967297: 5, 4294967298: 5})
    assert limited_end(state, ranges, 4) == {0: 4}  # the successors wait for segment 0
    assert limited_end(state, ranges, 12) == {4294967297: 2, 4294967298: 0}
    assert (
        SourceOptions.parse({"redis_url": "r", "scope": "s", "stream": "t"}).serializer == "bytes"
    )


def test_streaming_available_now_with_admission_control(
    spark: Any, events: dict[str, Any], tmp_path: Path
) -> None:
    stream = (
        spark.readStream.format("readergroup")
        .option("redis_url", events["url"])
        .option("scope", events["scope"])
        .option("stream", "orders")
        .option("start_stream_cut", "earliest")
        .option("max_events_per_trigger", "400")
        .load()
    )
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    query = (
        stream.writeStream.format("parquet")
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination(120)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) >= 4 and max(p["numInputRows"] for p in batches) <= 400
    written = spark.read.parquet(out)
    assert written.count() == 1500 == written.select("segment_id", "offset").distinct().count()
    subscribers = RetentionManager(StreamManager.from_url(events["url"])).subscriber_cuts(
        events["scope"], "orders"
    )
    assert any(name.startswith("external:spark:") for name in subscribers)  # published commits


def test_a_killed_query_restarts_from_its_checkpoint_exactly_once(
    spark: Any, events: dict[str, Any], tmp_path: Path
) -> None:
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    args = [
        sys.executable,
        "-m",
        "tests.support.spark_query",
        events["url"],
        events["scope"],
        "orders",
        ck,
        out,
        "150",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([*args, "1"], cwd=ROOT, env=env, start_new_session=True)
    commits = tmp_path / "ck" / "commits"
    deadline = time.monotonic() + 120
    while not (commits.exists() and len(list(commits.iterdir())) >= 2):
        assert first.poll() is None and time.monotonic() < deadline, "the query did not progress"
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)  # mid-run, most likely mid-batch: no clean shutdown
    first.wait(30)
    done = subprocess.run([*args, "0"], cwd=ROOT, env=env, timeout=300, check=False)
    assert done.returncode == 0
    written = spark.read.parquet(out)
    assert written.count() == 1500  # every event exactly once, despite the kill
    assert written.select("segment_id", "offset").distinct().count() == 1500


def test_the_sink_writes_once_per_job_and_per_batch(
    spark: Any, redis_url: str, scope: str, tmp_path: Path
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "sink", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
    rows = [(f"k{i % 10}", f"event-{i}") for i in range(300)]
    df = spark.createDataFrame(rows, "routing_key string, event string")
    options = {"redis_url": redis_url, "scope": scope, "stream": "sink"}
    df.write.format("readergroup").options(**options).mode("append").save()
    with EventStreamClientFactory.from_url(scope, redis_url) as f:
        got = list(f.create_batch_client().read_events("sink"))
    assert sorted(e.payload.decode() for e in got) == sorted(r[1] for r in rows)
    from readergroup.routing import key_position

    info = StreamManager.from_url(redis_url).get_stream_info(scope, "sink")
    ranges = {s.segment_id: (s.low, s.high) for s in info.active_segments}
    assert all(
        ranges[e.segment][0] <= key_position(e.routing_key) < ranges[e.segment][1] for e in got
    )
    # a streaming sink: every micro-batch committed once (batch-id dedup)
    (tmp_path / "in").mkdir()
    for n in range(3):
        (tmp_path / "in" / f"{n}.json").write_text(
            "\n".join(f'{{"routing_key": "s{i}", "event": "stream-{n}-{i}"}}' for i in range(20))
        )
    incoming = spark.readStream.schema("routing_key string, event string").json(
        str(tmp_path / "in")
    )
    query = (
        incoming.writeStream.format("readergroup")
        .options(**options)
        .option("writer_id", uuid.uuid4().hex)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    with EventStreamClientFactory.from_url(scope, redis_url) as f:
        streamed = [
            e
            for e in f.create_batch_client().read_events("sink")
            if e.payload.startswith(b"stream-")
        ]
    assert len(streamed) == 60 == len({e.payload for e in streamed})


def count_event(event: Any) -> None:
    """A picklable handler for executor readers."""


def test_executor_readers_consume_a_bounded_group(spark: Any, events: dict[str, Any]) -> None:
    with StreamManager.from_url(events["url"]) as sm:
        end = sm.tail_cut(events["scope"], "orders")
    with ReaderGroupManager.from_url(events["scope"], events["url"]) as rgm:
        rgm.create_reader_group(
            "spark-readers",
            ReaderGroupConfig(
                streams=[f"{events['scope']}/orders"], end=end, group_refresh_time=0.1
            ),
        )
    handled = run_executor_readers(
        spark,
        redis_url=events["url"],
        scope=events["scope"],
        group="spark-readers",
        handler=count_event,
        readers=2,
        serializer=UTF8StringSerializer(),
        run_seconds=60,
    )
    assert handled >= 1500  # at-least-once: all of it (duplicates possible only after a retry)


def test_sink_and_source_work_with_exactly_the_generated_rules(
    spark: Any, redis_url: str, scope: str, tmp_path: Path
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "acl", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        root = sm.connection.client
        urls = {}
        for role in ("writer", "reader"):
            user = f"{role}-{scope}"
            root.execute_command(*acl.rules(role, scope).setuser_args(user, "pw"))
            urls[role] = redis_url.replace("redis://", f"redis://{user}:pw@", 1)
    rows = [(f"k{i % 5}", f"event-{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "routing_key string, event string")
    options = {"scope": scope, "stream": "acl"}
    df.write.format("readergroup").options(**options, redis_url=urls["writer"]).mode(
        "append"
    ).save()
    read = spark.read.format("readergroup").options(**options, redis_url=urls["reader"]).load()
    assert sorted(bytes(r.event).decode() for r in read.collect()) == sorted(r[1] for r in rows)
    stream = (
        spark.readStream.format("readergroup")
        .options(**options, redis_url=urls["reader"], start_stream_cut="earliest")
        .option("max_events_per_trigger", "15")  # batches commit (publish) their predecessors
        .load()
    )
    query = (
        stream.writeStream.format("memory")
        .queryName(f"acl_{scope}")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert spark.sql(f"select * from acl_{scope}").count() == 40
    published = RetentionManager(StreamManager.from_url(redis_url)).subscriber_cuts(scope, "acl")
    assert any(name.startswith("external:spark:") for name in published)  # as the reader
