"""A Structured Streaming query from a readergroup stream to parquet, in its own process.

``python -m tests.support.spark_query URL SCOPE STREAM CHECKPOINT OUT MAX_PER_TRIGGER SLOW``

With SLOW=1 every micro-batch takes a while (so a test can kill the process mid-batch);
with SLOW=0 it runs to completion (Trigger.AvailableNow) and exits.
"""

from __future__ import annotations

import sys
import time

from pyspark.sql.functions import udf

from readergroup.spark.session import local_session


def slowly(offset: int) -> int:
    time.sleep(0.004)  # ~0.6 s per 150-event micro-batch: long enough to be killed inside one
    return offset


def main() -> int:
    url, scope, stream, checkpoint, out, per_trigger, slow = sys.argv[1:8]
    spark = local_session(cores=2, app_name="spark-query")
    df = (
        spark.readStream.format("readergroup")
        .option("redis_url", url)
        .option("scope", scope)
        .option("stream", stream)
        .option("start_stream_cut", "earliest")
        .option("max_events_per_trigger", per_trigger)
        .load()
    )
    if slow == "1":
        df = df.withColumn("offset", udf(slowly, "long")("offset"))
    query = (
        df.writeStream.format("parquet")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
