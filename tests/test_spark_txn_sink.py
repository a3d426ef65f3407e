"""The Spark sink on transactions (issue 31), its driver and task steps called directly (no
SparkSession: ``tests/test_spark.py`` runs it through Spark): tasks stage in transactions of
their own, invisible until the driver merges and commits them, once per job; a scale between
staging and commit is followed; a newer driver fences an older one's tasks."""

from __future__ import annotations

from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    TransactionFencedError,
)
from readergroup.spark.options import SourceOptions
from readergroup.spark.source import _driver_holder, _Stager, abort_job, commit_job
from readergroup.spark.txn_sink import sink_id


@pytest.fixture
def options(manager: StreamManager, scope: str, redis_url: str) -> SourceOptions:
    manager.create_stream(scope, "sink", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    return SourceOptions.parse({"redis_url": redis_url, "scope": scope, "stream": "sink"})


def rows(tag: str, count: int) -> list[dict[str, Any]]:
    return [{"routing_key": f"k{i % 7}", "event": f"{tag}{i}"} for i in range(count)]


def written(redis_url: str, scope: str) -> list[bytes]:
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        return sorted(e.payload for e in factory.create_batch_client().read_events("sink"))


def test_tasks_stage_invisibly_and_the_driver_commits_them_once(
    options: SourceOptions, manager: StreamManager, scope: str, redis_url: str
) -> None:
    job = "job-1"
    holder = _driver_holder(options, sink_id(job), fence=True)
    tasks = [_Stager(options, job, holder).stage(iter(rows(t, 30))) for t in ("a", "b")]
    assert written(redis_url, scope) == []  # staged only
    state = manager.stream_state(scope, "sink")  # a scale between staging and commit
    first = state.active_segments[0]
    middle = (first.low + first.high) / 2
    manager.scale_stream(
        scope, "sink", [first.segment_id], [(first.low, middle), (middle, first.high)]
    )
    assert commit_job(options, job, tasks) == 60
    expected = sorted(r["event"].encode() for t in ("a", "b") for r in rows(t, 30))
    assert written(redis_url, scope) == expected
    assert commit_job(options, job, tasks) == 0  # a retried commit of the job
    assert written(redis_url, scope) == expected


def test_a_newer_driver_fences_the_tasks_of_an_older_one(
    options: SourceOptions, scope: str, redis_url: str
) -> None:
    job = "job-2"
    old = _driver_holder(options, sink_id(job), fence=True)
    task = _Stager(options, job, old).stage(iter(rows("z", 10)))
    _driver_holder(options, sink_id(job), fence=True)  # the job's driver, again
    with pytest.raises(TransactionFencedError):
        commit_job(options, job, [task])
    assert written(redis_url, scope) == []
    abort_job(options, [task])
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        store = factory.connection.transactions(scope, "sink")  # type: ignore[attr-defined]
        assert store.unfinished() == []  # the aborted task left nothing open


def test_the_spark_source_and_lag_figures_see_committed_transactions_only(
    spark: Any, options: SourceOptions, scope: str, redis_url: str
) -> None:
    from readergroup import (
        BytesSerializer,
        ReaderGroupConfig,
        ReaderGroupManager,
        TransactionalWriterConfig,
    )

    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        writer = factory.create_transactional_writer(
            "sink", BytesSerializer(), TransactionalWriterConfig(transactional_id="iso")
        )
        for fate in ("commit", "abort", "open"):
            txn = writer.begin()
            for i in range(5):
                txn.write_event(f"{fate}{i}".encode(), routing_key=f"k{i}")
            txn.flush()
            if fate != "open":
                getattr(txn, fate)()
        with ReaderGroupManager.from_url(scope, redis_url) as rgm:
            rgm.create_reader_group("lag", ReaderGroupConfig(streams=[f"{scope}/sink"]))
            assert rgm.get_reader_group("lag").get_metrics().total.events == 5
    df = (
        spark.read.format("readergroup")
        .options(redis_url=redis_url, scope=scope, stream="sink")
        .load()
    )
    assert sorted(bytes(r.event) for r in df.collect()) == [f"commit{i}".encode() for i in range(5)]
