"""Reader-group readers running inside Spark executors, for long-lived consumers.

:func:`run_executor_readers` starts ``readers`` Spark tasks; each joins the reader group as
``<prefix>-<n>`` and hands every event to ``handler`` until ``run_seconds`` pass or, for a
bounded group, the end of data.

Guarantees, stated honestly: **at-least-once**. Each reader commits what it handed to
``handler`` (commit-on-get), so a task that dies is replaced from the last commit, and events
handled since then are handled again. Spark retries a failed task under the same reader id: a
retried attempt (``attemptNumber > 0``) joins with ``ReaderConfig(takeover=True)``, fencing the
dead attempt's membership at once instead of waiting out its session; meanwhile, or without a
retry, the group gives the segments to the other readers once the session expires. A first
attempt never takes over, so two jobs given the same reader ids still fail clearly. Unlike
the data source, this is not replayable: Spark's checkpoints do not cover it. Use it for
side-effecting consumers (sinks with their own idempotence, alerting); use
``spark.readStream.format("readergroup")`` for exactly-once pipelines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql import SparkSession

from readergroup.client.client_factory import EventStreamClientFactory
from readergroup.client.reader import EventRead
from readergroup.client.serializers import BytesSerializer, Serializer
from readergroup.core.config import ClientConfig
from readergroup.core.group_config import ReaderConfig


def _task(
    redis_url: str,
    scope: str,
    group: str,
    prefix: str,
    handler: Callable[[EventRead[Any]], Any],
    serializer: Serializer[Any],
    run_seconds: float | None,
    key_prefix: str,
) -> Callable[[int, Iterator[Any]], Iterator[int]]:
    def run(index: int, _: Iterator[Any]) -> Iterator[int]:
        handled = 0
        deadline = None if run_seconds is None else time.monotonic() + run_seconds
        config = ClientConfig(key_prefix=key_prefix)
        context = TaskContext.get()
        retried = context is not None and context.attemptNumber() > 0
        with (
            EventStreamClientFactory.from_url(scope, redis_url, config) as factory,
            factory.create_reader(
                f"{prefix}-{index}", group, serializer, ReaderConfig(takeover=retried)
            ) as reader,
        ):
            while deadline is None or time.monotonic() < deadline:
                batch = reader.read_batch(500, timeout=0.5)
                for event in batch:
                    handler(event)
                    handled += 1
                if not batch and reader.is_end_of_data():
                    break
        yield handled

    return run


def run_executor_readers(
    spark: SparkSession,
    *,
    redis_url: str,
    scope: str,
    group: str,
    handler: Callable[[EventRead[Any]], Any],
    readers: int = 2,
    serializer: Serializer[Any] | None = None,
    run_seconds: float | None = None,
    reader_prefix: str = "spark-reader",
    key_prefix: str = "rg",
) -> int:
    """Run ``readers`` group readers as Spark tasks; return how many events they handled.

    ``handler`` must be picklable (a module-level function or a picklable callable); it runs in
    the executors. With neither ``run_seconds`` nor a bounded group this runs until cancelled.
    """
    if readers < 1:
        raise ValueError("readers must be >= 1")
    task = _task(
        redis_url,
        scope,
        group,
        reader_prefix,
        handler,
        serializer or BytesSerializer(),
        run_seconds,
        key_prefix,
    )
    rdd = spark.sparkContext.parallelize(range(readers), readers)
    return int(rdd.mapPartitionsWithIndex(task).sum())  # type: ignore[arg-type]
