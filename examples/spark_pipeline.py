"""A Spark pipeline: events into a stream that scales mid-run, a Structured Streaming
aggregation per key, and the results checked exactly against what was written.

    python examples/spark_pipeline.py [--events 6000]

Runs against the embedded default Redis (``REDIS_URL`` if set) and a local SparkSession.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from readergroup import (
    EventStreamClientFactory,
    JsonSerializer,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.spark.session import local_session
from readergroup.testing.embedded_redis import redis_server


def write_events(url: str, scope: str, count: int, scale_at: threading.Event) -> Counter[str]:
    """Write ``count`` events; halfway through, another thread scales the stream."""
    expected: Counter[str] = Counter()
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer("clicks", JsonSerializer())
        for i in range(count):
            page, amount = f"page-{i % 13}", i % 5 + 1
            writer.write_event({"page": page, "amount": amount}, routing_key=page)
            expected[page] += amount
            if i == count // 2:
                writer.flush()
                scale_at.set()
        writer.close()
    return expected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=6000)
    args = parser.parse_args()
    scope = f"pipe{uuid.uuid4().hex[:6]}"
    with redis_server() as server, tempfile.TemporaryDirectory() as work:
        url = server.url
        with StreamManager.from_url(url) as sm:
            sm.create_scope(scope)
            sm.create_stream(
                scope, "clicks", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))
            )
            halfway = threading.Event()
            result: dict[str, Counter[str]] = {}
            writer = threading.Thread(
                target=lambda: result.update(
                    expected=write_events(url, scope, args.events, halfway)
                )
            )
            writer.start()
            halfway.wait(60)
            new = sm.scale_stream(scope, "clicks", [0], [(0.0, 0.25), (0.25, 0.5)])  # mid-run split
            writer.join(120)
            print(f"wrote {args.events} events; split segment 0 into {new} while writing")

        spark = local_session(cores=2, app_name="readergroup-pipeline")
        clicks = (
            spark.readStream.format("readergroup")
            .option("redis_url", url)
            .option("scope", scope)
            .option("stream", "clicks")
            .option("start_stream_cut", "earliest")
            .option("serializer", "json")
            .option("max_events_per_trigger", "1500")
            .schema("routing_key string, offset long, page string, amount int")
            .load()
        )
        totals = clicks.groupBy("page").sum("amount").withColumnRenamed("sum(amount)", "total")
        query = (
            totals.writeStream.outputMode("complete")
            .format("memory")
            .queryName("page_totals")
            .option("checkpointLocation", str(Path(work) / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        batches = sum(1 for p in query.recentProgress if p["numInputRows"])
        got = {row.page: row.total for row in spark.sql("select * from page_totals").collect()}
        spark.stop()
    expected = result["expected"]
    ok = got == dict(expected)
    print(f"{len(got)} pages aggregated over {batches} micro-batches; exact={ok}")
    print(
        "VERIFIED: Spark totals equal what was written" if ok else f"MISMATCH {got} != {expected}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
