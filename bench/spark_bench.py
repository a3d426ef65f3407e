"""Spark batch read throughput against the library's own single-process batch read.

In one run, on the same data (``--events`` events of 100 bytes on a 4-segment stream):

* ``single_process``: ``BatchClient.read_events`` in one Python process (the baseline);
* ``partition_reader``: the data source's executor-side read without Spark: the partitions
  the driver plans, each read by ``ReaderGroupBatchReader.read`` into Arrow record batches, in
  one process (``ratio_partition_reader`` = its events/s over the baseline's; goal >= 0.9);
* ``spark.read.format("readergroup")`` counted with ``local[1]`` and ``local[2]`` (JVM warm).

The baseline and the partition reader alternate, best of ``--repeat`` each; Spark counts are
the best of two each. Prints JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import emit
from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.spark.options import SourceOptions
from readergroup.spark.source import BASE_SCHEMA, ReaderGroupBatchReader
from readergroup.testing.embedded_redis import redis_server


def spark_rate(url: str, scope: str, cores: int, events: int) -> float:
    from readergroup.spark.session import local_session

    spark = local_session(cores=cores, app_name=f"bench-{cores}")
    best = float("inf")
    for _ in range(2):
        df = (
            spark.read.format("readergroup")
            .option("redis_url", url)
            .option("scope", scope)
            .option("stream", "s")
            .option("max_events_per_partition", "50000")
            .load()
        )
        began = time.perf_counter()
        counted = df.count()
        best = min(best, time.perf_counter() - began)
        assert counted == events, counted
    spark.stop()
    return events / best


def partition_reader_seconds(url: str, scope: str, events: int) -> float:
    """The executor-side read of every planned partition, without Spark."""
    options = SourceOptions.parse(
        {"redis_url": url, "scope": scope, "stream": "s", "max_events_per_partition": "50000"}
    )
    reader = ReaderGroupBatchReader(options, BASE_SCHEMA)
    partitions = reader.partitions()
    began = time.perf_counter()
    counted = sum(batch.num_rows for p in partitions for batch in reader.read(p))
    elapsed = time.perf_counter() - began
    assert counted == events, counted
    return elapsed


def single_process_seconds(batch: Any, events: int) -> float:
    began = time.perf_counter()
    counted = sum(1 for _ in batch.read_events("s"))
    elapsed = time.perf_counter() - began
    assert counted == events, counted
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    scope = f"sb{uuid.uuid4().hex[:6]}"
    results: dict[str, Any] = {"events": args.events, "event_bytes": 100}
    with redis_server() as server:
        url = server.url
        with StreamManager.from_url(url) as sm:
            sm.create_scope(scope)
            sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))
        with EventStreamClientFactory.from_url(scope, url) as factory:
            with factory.create_event_writer("s", BytesSerializer()) as writer:
                for i in range(args.events):
                    writer.write_event(b"x" * 100, f"k{i % 1000}")
            batch = factory.create_batch_client()
            single_s = partition_s = float("inf")
            for _ in range(args.repeat):
                single_s = min(single_s, single_process_seconds(batch, args.events))
                partition_s = min(partition_s, partition_reader_seconds(url, scope, args.events))
        single = args.events / single_s
        partition = args.events / partition_s
        one = spark_rate(url, scope, 1, args.events)
        two = spark_rate(url, scope, 2, args.events)
        results.update(
            server=server.kind,
            single_process_events_per_s=round(single),
            partition_reader_events_per_s=round(partition),
            ratio_partition_reader=round(partition / single, 2),
            spark_local1_events_per_s=round(one),
            spark_local2_events_per_s=round(two),
            ratio_local1=round(one / single, 2),
            ratio_local2=round(two / single, 2),
            ratio_local2_to_local1=round(two / one, 2),
        )
    emit("spark", results)


if __name__ == "__main__":
    main()
