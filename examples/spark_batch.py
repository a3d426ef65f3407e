"""Spark batch reads between two stream cuts, with JSON events decoded into columns.

python examples/spark_batch.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from readergroup import EventStreamClientFactory, JsonSerializer, StreamManager
from readergroup.spark.session import local_session
from readergroup.testing.embedded_redis import redis_server


def main() -> int:
    with redis_server() as server, StreamManager.from_url(server.url) as sm:
        url = server.url
        sm.create_scope("shop")
        sm.create_stream("shop", "sales")
        with EventStreamClientFactory.from_url("shop", url) as factory:
            with factory.create_event_writer("sales", JsonSerializer()) as writer:
                for i in range(100):
                    writer.write_event({"item": f"i{i % 4}", "price": i}, routing_key=f"i{i % 4}")
            middle = sm.tail_cut("shop", "sales")  # a cut after the first 100 events
            with factory.create_event_writer("sales", JsonSerializer()) as writer:
                for i in range(100, 150):
                    writer.write_event({"item": f"i{i % 4}", "price": i}, routing_key=f"i{i % 4}")
        spark = local_session(cores=2, app_name="spark-batch")
        sales = (
            spark.read.format("readergroup")
            .option("redis_url", url)
            .option("scope", "shop")
            .option("stream", "sales")
            .option("end_stream_cut", str(middle))  # only what was written before the cut
            .option("serializer", "json")
            .schema("routing_key string, offset long, item string, price long")
            .load()
        )
        totals = {r.item: r["sum(price)"] for r in sales.groupBy("item").sum("price").collect()}
        spark.stop()
    expected = {f"i{k}": sum(i for i in range(100) if i % 4 == k) for k in range(4)}
    print(totals)
    ok = totals == expected
    print("VERIFIED: batch totals up to the cut are exact" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
