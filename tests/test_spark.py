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
    ClientConfig,
    EventStreamClientFactory,
    JsonSerializer,
    ReaderGroupConfig,
    ReaderGroupManager,
    RetentionManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    StreamSealedError,
    UTF8StringSerializer,
)
from readergroup.admin import acl
from readergroup.core.stream_metadata import ScaleStream, initial_state
from readergroup.spark.executor_readers import run_executor_readers
from readergroup.spark.options import SourceOptions, decode_offset, encode_offset, limited_end
from tests.support.waiting import wait_until

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
    from readergroup.core.planning import plan_ranges

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


@pytest.mark.long
@pytest.mark.timeout(600)  # two Spark processes in a row: slow on a loaded machine
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
    deadline = time.monotonic() + 300
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
    from readergroup.core.routing import key_position

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


# -- edges: scaling, time and truncation (issue 19) --------------------------------------------
class Crash(Exception):
    """The scaling process dies here."""


def crashed_scale(url: str, scope: str, stream: str, sealed: list[int], ranges: Any) -> list[int]:
    """A scale whose process dies after the metadata update, before sealing in Redis."""
    with StreamManager.from_url(url) as sm:

        def die(*_: Any) -> int:
            raise Crash

        sm.connection.segments.seal_segments = die  # type: ignore[method-assign]
        with pytest.raises(Crash):
            sm.scale_stream(scope, stream, sealed, ranges)
        return [s for s in sm.stream_state(scope, stream).segments if s not in sealed]


def stale_writer(url: str, scope: str, stream: str) -> Any:
    """A writer that trusts its cached metadata for the whole test."""
    factory = EventStreamClientFactory.from_url(scope, url, ClientConfig(metadata_ttl=3600))
    return factory, factory.create_event_writer(stream, UTF8StringSerializer())


def written(writer: Any, prefix: str, count: int) -> list[Any]:
    futures = [writer.write_event(f"{prefix}{i}", routing_key=f"k{i}") for i in range(count)]
    writer.flush()
    return [f.result(30) for f in futures]


def payloads(df: Any) -> list[str]:
    return sorted(bytes(r.event).decode() for r in df.select("event").collect())


def test_a_crashed_scale_loses_nothing_from_a_streaming_query(
    spark: Any, redis_url: str, scope: str
) -> None:
    """Item 1: the query seals the predecessor before it passes it, so a writer with cached
    metadata cannot append behind the query's back."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "crash", StreamConfiguration())
    factory, writer = stale_writer(redis_url, scope, "crash")
    with factory, writer:
        written(writer, "a", 100)
        crashed_scale(redis_url, scope, "crash", [0], [(0.0, 0.5), (0.5, 1.0)])
        name = f"crash_{uuid.uuid4().hex[:8]}"
        query = (
            spark.readStream.format("readergroup")
            .options(redis_url=redis_url, scope=scope, stream="crash")
            .load()
            .writeStream.format("memory")
            .queryName(name)
            .start()
        )
        try:
            query.processAllAvailable()
            late = written(writer, "b", 50)  # acknowledged: must reach the query
            query.processAllAvailable()
            rows = spark.sql(f"select segment_id, offset, event from {name}").collect()
        finally:
            query.stop()
    assert len(late) == 50
    assert len(rows) == 150 == len({(r.segment_id, r.offset) for r in rows})


@pytest.fixture
def truncated(redis_url: str, scope: str) -> dict[str, Any]:
    """Two segments; a start cut and a time taken after the first 200 events; segment 0 then
    split and truncated away (segment 1 untouched)."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "t", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    with (
        StreamManager.from_url(redis_url) as sm,
        EventStreamClientFactory.from_url(scope, redis_url) as f,
        f.create_event_writer("t", UTF8StringSerializer()) as writer,
    ):
        early = written(writer, "early", 200)
        start = sm.tail_cut(scope, "t")
        at = sm.connection.server_time_ms() + 1
        wait_until(lambda: sm.connection.server_time_ms() > at)
        late = written(writer, "late", 100)
        split = sm.scale_stream(scope, "t", [0], [(0.0, 0.25), (0.25, 0.5)])
        written(writer, "later", 60)
        sm.truncate_stream(scope, "t", StreamCut(scope, "t", {1: 0, **dict.fromkeys(split, 0)}))
    lost = {f"late{i}" for i, p in enumerate(late) if p.segment == 0}
    kept = {f"late{i}" for i, p in enumerate(late) if p.segment == 1} | {
        f"later{i}" for i in range(60)
    }
    assert lost and any(p.segment == 1 for p in early)
    return {"scope": scope, "url": redis_url, "start": start, "at": at, "expected": sorted(kept)}


def test_fail_on_data_loss_false_and_timestamps_skip_only_the_lost_part(
    spark: Any, truncated: dict[str, Any]
) -> None:
    """Items 2 and 3: segment 0 of the start cut was truncated away; only its part is skipped,
    and segment 1 still starts at the cut (or at the time), not at the head."""
    t = {"redis_url": truncated["url"], "scope": truncated["scope"], "stream": "t"}
    by_cut = spark.read.format("readergroup").options(**t)
    by_cut = by_cut.option("start_stream_cut", str(truncated["start"]))
    with pytest.raises(Exception, match=r"TruncatedDataError.*deleted segment"):
        by_cut.load().count()
    lenient = by_cut.option("fail_on_data_loss", "false").load()
    assert payloads(lenient) == truncated["expected"]
    by_time = spark.read.format("readergroup").options(**t)
    by_time = by_time.option("starting_timestamp", str(truncated["at"])).load()
    assert payloads(by_time) == truncated["expected"]


def test_time_cuts_are_exact_at_a_scale_boundary(spark: Any, redis_url: str, scope: str) -> None:
    """Item 4: after a scale's metadata update, a writer with cached metadata still appends to
    the predecessor; a time cut splits every segment at the time (none goes to the successors
    before its predecessors are sealed)."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "edge", StreamConfiguration())
        factory, writer = stale_writer(redis_url, scope, "edge")
        with factory, writer:
            written(writer, "old", 20)
            successors = crashed_scale(redis_url, scope, "edge", [0], [(0.0, 0.5), (0.5, 1.0)])
            at = sm.connection.server_time_ms() + 1
            wait_until(lambda: sm.connection.server_time_ms() > at)
            assert {p.segment for p in written(writer, "new", 30)} == {0}  # unsealed still
    t = {"redis_url": redis_url, "scope": scope, "stream": "edge"}
    before = spark.read.format("readergroup").options(**t, ending_timestamp=str(at)).load()
    assert payloads(before) == sorted(f"old{i}" for i in range(20))
    with (
        EventStreamClientFactory.from_url(scope, redis_url) as f,
        f.create_event_writer("edge", UTF8StringSerializer()) as fresh,
    ):
        assert {p.segment for p in written(fresh, "newer", 10)} <= set(successors)
    after = spark.read.format("readergroup").options(**t, starting_timestamp=str(at)).load()
    assert payloads(after) == sorted(
        [f"new{i}" for i in range(30)] + [f"newer{i}" for i in range(10)]
    )
    with EventStreamClientFactory.from_url(scope, redis_url) as f:
        reads = list(f.create_batch_client().read_events("edge"))
    last_old = max(e.server_ms for e in reads if e.segment == 0)  # server times never go back
    assert all(e.server_ms >= last_old for e in reads if e.segment in successors)


def test_a_cut_from_a_half_read_merge_is_planned_exactly(
    spark: Any, redis_url: str, scope: str, tmp_path: Path
) -> None:
    """Item 5: a group checkpoint taken while merge predecessor 0 is complete and 1 is being
    read holds only {1: 60}; the source reads 1 from 60, then the merged segment."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "m", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    with (
        StreamManager.from_url(redis_url) as sm,
        EventStreamClientFactory.from_url(scope, redis_url) as f,
        f.create_event_writer("m", UTF8StringSerializer()) as writer,
    ):
        first = written(writer, "a", 200)
        (merged,) = sm.scale_stream(scope, "m", [0, 1], [(0.0, 1.0)])
        written(writer, "b", 40)
    in_one = [f"a{i}" for i, p in enumerate(first) if p.segment == 1 and p.offset >= 60]
    tail0 = sum(1 for p in first if p.segment == 0)
    expected = sorted(in_one + [f"b{i}" for i in range(40)])
    t = {"redis_url": redis_url, "scope": scope, "stream": "m"}
    for cut in ({1: 60}, {0: tail0, 1: 60}):  # as recorded, and covering the key space
        text = str(StreamCut(scope, "m", cut))
        df = spark.read.format("readergroup").options(**t, start_stream_cut=text).load()
        assert payloads(df) == expected
    query = (
        spark.readStream.format("readergroup")
        .options(**t, start_stream_cut=str(StreamCut(scope, "m", {1: 60})))
        .option("max_events_per_trigger", "50")
        .load()
        .writeStream.format("parquet")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "out"))
    )
    query.awaitTermination(120)
    assert payloads(spark.read.parquet(str(tmp_path / "out"))) == expected
    assert merged in {r.segment_id for r in spark.read.parquet(str(tmp_path / "out")).collect()}


def test_the_sink_refuses_a_sealed_stream_and_writes_nothing(
    spark: Any, redis_url: str, scope: str
) -> None:
    """Item 6: sealed before the write (executor) and between staging and commit (driver)."""
    from readergroup.spark.source import _Stager, commit_job

    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "sealed", StreamConfiguration())
        options = {"redis_url": redis_url, "scope": scope, "stream": "sealed"}
        job = f"job-{uuid.uuid4().hex}"
        staged = _Stager(SourceOptions.parse(options), job).stage(
            iter([{"routing_key": f"k{i}", "event": f"e{i}"} for i in range(20)])
        )
        sm.seal_stream(scope, "sealed")
        with pytest.raises(StreamSealedError, match=f"{scope}/sealed was sealed"):
            commit_job(SourceOptions.parse(options), job, [staged])
        df = spark.createDataFrame([("k", "e")], "routing_key string, event string")
        with pytest.raises(Exception, match=r"StreamSealedError.*sealed"):
            df.write.format("readergroup").options(**options).mode("append").save()
        assert sm.get_stream_info(scope, "sealed").tail_cut.positions == {0: 0}  # nothing
        assert not sm.connection.client.keys(f"rg:{{stage:{scope}/sealed}}:{job}*")


def crash_first_attempt(event: Any) -> None:
    """A handler whose first attempt of task 0 dies (the Python worker is killed)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context.partitionId() == 0 and context.attemptNumber() == 0:
        os._exit(3)


def test_a_retried_executor_reader_takes_over_its_predecessor(
    spark: Any, events: dict[str, Any]
) -> None:
    """Item 7: Spark retries the killed task under the same reader id long before the dead
    reader's 60 s session expires; the retry fences it and carries on."""
    with StreamManager.from_url(events["url"]) as sm:
        end = sm.tail_cut(events["scope"], "orders")
    with ReaderGroupManager.from_url(events["scope"], events["url"]) as rgm:
        rgm.create_reader_group(
            "retried",
            ReaderGroupConfig(
                streams=[f"{events['scope']}/orders"],
                end=end,
                group_refresh_time=0.1,
                session_timeout=60.0,
            ),
        )
    began = time.monotonic()
    handled = run_executor_readers(
        spark,
        redis_url=events["url"],
        scope=events["scope"],
        group="retried",
        handler=crash_first_attempt,
        readers=2,
        run_seconds=50,
    )
    assert handled >= 1500
    assert time.monotonic() - began < 50  # finished, not stopped by run_seconds


LOOKUP = """
import io, sys
from pyspark.serializers import read_int
from pyspark.sql.worker.lookup_data_sources import _main
out = io.BytesIO()
_main(io.BytesIO(), out)
out.seek(0)
names = []
for _ in range(read_int(out)):
    names.append(out.read(read_int(out)).decode())
    out.read(read_int(out))
import readergroup
print(",".join(names), readergroup.__file__)
"""


def spark_lookup(cwd: Path, python_path: list[str], isolated: bool) -> str:
    """What PySpark's own data source lookup finds, in a fresh interpreter outside the
    checkout (``isolated``: no site-packages processing, only ``python_path``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    flags = ["-S"] if isolated else []
    done = subprocess.run(
        [sys.executable, *flags, "-c", LOOKUP],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_source_is_found_installed_editable_and_from_py_files(
    spark: Any, events: dict[str, Any], tmp_path: Path
) -> None:
    """Item 8: the editable install of this checkout, and a --py-files zip on a bare path."""
    import site

    from readergroup.spark.session import py_files_zip, register

    names, origin = spark_lookup(tmp_path, [], isolated=False).split(" ")
    assert "readergroup" in names.split(",") and origin.startswith(str(ROOT))
    shipped = py_files_zip(tmp_path / "readergroup.zip")
    bare = [p for p in site.getsitepackages() if Path(p).is_dir()]
    names, origin = spark_lookup(tmp_path, [str(shipped), *bare], isolated=True).split(" ")
    assert "readergroup" in names.split(",") and origin.startswith(str(shipped))
    register(spark)  # explicit registration, for anywhere else
    assert source(spark, events).load().count() == 1500
