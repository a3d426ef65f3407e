"""The Spark sink's merge of a job's task transactions in bounded steps (issue 31 review): no
``txn_merge.lua`` call moves more than :data:`MERGE_STEP_ITEMS` staging items, so a large
job's merge never blocks Redis for the whole job; a merge interrupted between steps is
resumed by the retry and commits every row exactly once; an older driver is fenced from it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    TransactionalWriterConfig,
    TransactionFencedError,
)
from readergroup.core.errors import (
    RedisUnavailableError,
    TransactionClosedError,
    TransactionExpiredError,
)
from readergroup.core.transactions import MERGE_STEP_ITEMS, TxnStatus
from readergroup.spark.options import SourceOptions
from readergroup.spark.source import _driver_holder, _Stager, commit_job
from readergroup.spark.txn_sink import STAGE_EVENTS, sink_id
from readergroup.storage.connection import RedisConnection
from readergroup.storage.txn_store import TxnStore

TASKS = 4
ROWS = 12 * STAGE_EVENTS  # 12 staging items per task: 48 in all, three full steps' worth


@pytest.fixture
def options(manager: StreamManager, scope: str, redis_url: str) -> SourceOptions:
    manager.create_stream(scope, "big", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
    return SourceOptions.parse({"redis_url": redis_url, "scope": scope, "stream": "big"})


def rows(tag: str, count: int) -> Iterator[dict[str, Any]]:
    return ({"routing_key": f"k{i % 11}", "event": f"{tag}-{i}"} for i in range(count))


def written(redis_url: str, scope: str) -> list[bytes]:
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        return sorted(e.payload for e in factory.create_batch_client().read_events("big"))


def expected() -> list[bytes]:
    return sorted(f"t{t}-{i}".encode() for t in range(TASKS) for i in range(ROWS))


class MergeProbe:
    """Instruments :meth:`TxnStore._run` (every script call of the store): per
    ``txn_merge`` call, how many items the target's staging list gained; ``die_after``: the
    driver dies (the reply is lost) right after that many merge calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, die_after: int = 0) -> None:
        self.moved: list[int] = []
        self.die_after = die_after
        run = TxnStore._run
        probe = self

        def measured(store: TxnStore, script: str, txn_id: str, keys: list[str], args: Any) -> Any:
            if script != "txn_merge":
                return run(store, script, txn_id, keys, args)
            before = int(store._client.llen(store.staged_key(txn_id)))
            reply = run(store, script, txn_id, keys, args)
            probe.moved.append(int(store._client.llen(store.staged_key(txn_id))) - before)
            if probe.die_after and len(probe.moved) == probe.die_after:
                raise RedisUnavailableError("driver died between merge steps (test)")
            return reply

        monkeypatch.setattr(TxnStore, "_run", measured)


def redis_of(factory: EventStreamClientFactory) -> RedisConnection:
    return cast(RedisConnection, factory.connection)


def stage_tasks(options: SourceOptions, job: str) -> list[Any]:
    holder = _driver_holder(options, sink_id(job), fence=True)
    return [_Stager(options, job, holder).stage(rows(f"t{t}", ROWS)) for t in range(TASKS)]


def interrupted_merge(
    options: SourceOptions, job: str, monkeypatch: pytest.MonkeyPatch, steps: int
) -> tuple[list[Any], MergeProbe]:
    """The tasks of ``job``, whose driver died after ``steps`` merge steps."""
    tasks = stage_tasks(options, job)
    probe = MergeProbe(monkeypatch, die_after=steps)
    with pytest.raises(RedisUnavailableError):
        commit_job(options, job, tasks)
    probe.die_after = 0
    return tasks, probe


def test_a_large_merge_moves_a_bounded_amount_per_script_call(
    options: SourceOptions, scope: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = stage_tasks(options, "large")
    probe = MergeProbe(monkeypatch)
    assert commit_job(options, "large", tasks) == TASKS * ROWS
    assert sum(probe.moved) == TASKS * ROWS // STAGE_EVENTS  # every staging item, once
    assert max(probe.moved) <= MERGE_STEP_ITEMS, probe.moved  # one script call: bounded
    assert written(redis_url, scope) == expected()


def test_a_merge_interrupted_between_steps_is_resumed_by_the_retry(
    options: SourceOptions, scope: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks, probe = interrupted_merge(options, "resumed", monkeypatch, steps=2)
    assert 0 < sum(probe.moved) < TASKS * ROWS // STAGE_EVENTS  # stopped halfway
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        store = redis_of(factory).transactions(scope, "big")
        record = store.record(f"{sink_id('resumed')}:job-resumed")
        assert record is not None and record.status is TxnStatus.MERGING
    assert written(redis_url, scope) == []  # nothing visible mid-merge
    assert commit_job(options, "resumed", tasks) == TASKS * ROWS  # Spark retries the commit
    assert max(probe.moved) <= MERGE_STEP_ITEMS
    assert written(redis_url, scope) == expected()  # every row exactly once
    assert commit_job(options, "resumed", tasks) == 0  # a replay merges nothing twice
    assert written(redis_url, scope) == expected()


def test_a_newer_driver_takes_an_interrupted_merge_over_and_fences_the_older(
    options: SourceOptions, scope: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks, probe = interrupted_merge(options, "taken", monkeypatch, steps=1)
    transactional_id, old = tasks[0].holder
    new = _driver_holder(options, transactional_id, fence=True)[1]
    target = f"{transactional_id}:job-taken"
    sources = [t for m in tasks for t in m.txns]
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        store = redis_of(factory).transactions(scope, "big")
        with pytest.raises(TransactionFencedError):  # the older driver resuming its merge
            store.merge_step(target, sources, transactional_id, old, 60_000, 60_000)
        assert store.merge(target, sources, transactional_id, new, 60_000, 60_000) == ""
        record = store.record(target)
        assert record is not None and record.status is TxnStatus.OPEN
        assert record.epoch == new and record.events == TASKS * ROWS
        assert len(store.staged(target)) == TASKS * ROWS
        assert max(probe.moved) <= MERGE_STEP_ITEMS


def left_merging(store: TxnStore, job: str, tasks: list[Any]) -> tuple[str, list[str], str, int]:
    """``job``'s merge after one step, its driver gone past its lease: (target, sources,
    transactional id, epoch)."""
    transactional_id, epoch = tasks[0].holder
    target = f"{transactional_id}:job-{job}"
    sources = [t for m in tasks for t in m.txns]
    step = store.merge_step(target, sources, transactional_id, epoch, 60_000, 60_000)
    assert step.state == "MERGING" and step.moved == MERGE_STEP_ITEMS
    store._client.hset(store.record_key(target), "deadline", 0)  # its lease ran out
    store._client.zadd(store.open_key, {target: 0})
    return target, sources, transactional_id, epoch


def test_a_merge_left_past_its_lease_is_aborted_with_its_staging(
    options: SourceOptions, scope: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = stage_tasks(options, "left")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        store = redis_of(factory).transactions(scope, "big")
        target, sources, transactional_id, epoch = left_merging(store, "left", tasks)
        client = redis_of(factory).client
        with pytest.raises(TransactionExpiredError):
            store.merge_step(target, sources, transactional_id, epoch, 1, 60_000)
        record = store.record(target)
        assert record is not None and record.status is TxnStatus.ABORTED
        keys = [store.staged_key(t) for t in [target, *sources]]
        assert client.exists(*keys) == 0  # no staged row left behind
        assert store.unfinished() == []
    assert written(redis_url, scope) == []


def test_the_sweep_aborts_a_merge_its_driver_left_past_the_lease(
    options: SourceOptions, scope: str, redis_url: str
) -> None:
    tasks = stage_tasks(options, "swept")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        store = redis_of(factory).transactions(scope, "big")
        target = left_merging(store, "swept", tasks)[0]
        writer = factory.create_transactional_writer(
            "big", BytesSerializer(), TransactionalWriterConfig(transactional_id="sweeper")
        )
        writer.sweep()
        record = store.record(target)
        assert record is not None and record.status is TxnStatus.ABORTED
        assert redis_of(factory).client.exists(store.staged_key(target)) == 0
        assert store.unfinished() == []
        with pytest.raises(TransactionClosedError):  # the job's commit cannot resume it
            commit_job(options, "swept", tasks)
    assert written(redis_url, scope) == []
