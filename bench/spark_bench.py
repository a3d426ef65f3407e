"""Spark batch read throughput against the library's own single-process batch read.

In one run, on the same data (``--events`` events of 100 bytes on a 4-segment stream):
``BatchClient.read_events`` in one Python process, and ``spark.read.format("readergroup")``
counted with ``local[1]`` and ``local[2]`` (best of two runs each, JVM warm). Ratios are Spark
events/s over the single-process events/s. Prints JSON.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
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
            began = time.perf_counter()
            counted = sum(1 for _ in batch.read_events("s"))
            single = args.events / (time.perf_counter() - began)
            assert counted == args.events
        one = spark_rate(url, scope, 1, args.events)
        two = spark_rate(url, scope, 2, args.events)
        results.update(
            server=server.kind,
            single_process_events_per_s=round(single),
            spark_local1_events_per_s=round(one),
            spark_local2_events_per_s=round(two),
            ratio_local1=round(one / single, 2),
            ratio_local2=round(two / single, 2),
        )
    emit("spark", results)


if __name__ == "__main__":
    main()
