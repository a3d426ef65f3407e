"""The Spark source and sink take a ``redis+sentinel://`` URL (issue 18; the CLI's endpoints:
tests/test_ha_endpoints.py), the sink across a failover. Real servers, Sentinels and a real
SparkSession started by the suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from readergroup import EventStreamClientFactory, ScalingPolicy, StreamConfiguration, StreamManager
from readergroup.testing.embedded_redis import local_sentinel_group
from tests.support.cli import cli


@pytest.mark.long  # about 22 s: a SparkSession and 3 Sentinels (clients: in make test)
def test_the_spark_source_takes_a_sentinel_url(spark: Any, unique_name: str) -> None:
    name = f"{unique_name}/orders"
    with local_sentinel_group(replicas=1, sentinels=3) as group:
        cli(group.url, "stream", "create", name, "--segments", "2")
        cli(group.url, "stream", "write", name, "--count", "25")
        frame = (
            spark.read.format("readergroup")
            .option("redis_url", group.url)
            .option("scope", unique_name)
            .option("stream", "orders")
            .load()
        )
        assert frame.count() == 25


@pytest.mark.long  # a Sentinel group, a failover and three streaming batches: 30-90 s
def test_the_spark_sink_writes_each_batch_once_across_a_sentinel_failover(
    spark: Any, unique_name: str, tmp_path: Path
) -> None:
    """A streaming query writes through the sink to a Sentinel-managed primary; between two
    runs the Sentinels fail over, and Spark replays the first batch (its commit log lost, as
    after a crash between the sink's commit and Spark's). Every row lands exactly once (the
    sink recognises a batch id it committed), and none on the old primary, which stays a
    writable primary for seconds after the switch: rows written there would vanish when the
    Sentinels turn it into a replica."""
    with local_sentinel_group(replicas=1, sentinels=3) as group:
        url = group.url
        with StreamManager.from_url(url) as sm:
            sm.create_scope(unique_name)
            sm.create_stream(
                unique_name, "sink", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))
            )
        incoming, checkpoint = tmp_path / "in", tmp_path / "ck"
        incoming.mkdir()
        expected: list[str] = []

        def batch(number: int) -> None:
            rows = [f"b{number}-{i}" for i in range(20)]
            expected.extend(rows)
            (incoming / f"{number}.json").write_text(
                "\n".join(
                    f'{{"routing_key": "k{i % 7}", "event": "{r}"}}' for i, r in enumerate(rows)
                )
            )

        def run_query() -> None:
            query = (
                spark.readStream.schema("routing_key string, event string")
                .json(str(incoming))
                .writeStream.format("readergroup")
                .option("redis_url", url)
                .option("scope", unique_name)
                .option("stream", "sink")
                .option("writer_id", "sentinel-sink")
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(120)
            assert query.exception() is None

        def stored(source: str) -> list[str]:
            with EventStreamClientFactory.from_url(unique_name, source) as factory:
                events = factory.create_batch_client().read_events("sink")
                return sorted(event.payload.decode() for event in events)

        batch(0)
        run_query()
        old = group.primary_port()
        assert redis.Redis(port=old).wait(1, 10_000) == 1  # batch 0 is on the replica too
        for name in ("0", ".0.crc"):  # Spark runs batch 0 again at the next start
            (checkpoint / "commits" / name).unlink()
        promoted = group.failover()
        batch(1)
        run_query()  # batch 0 again (recognised, not written), then batch 1
        assert (checkpoint / "commits" / "0").exists()  # Spark did run batch 0 again
        assert stored(f"redis://127.0.0.1:{promoted}") == sorted(expected)
        group.wait_replicating()  # the old primary is a replica now: what it took alone is gone
        assert stored(url) == sorted(expected)
