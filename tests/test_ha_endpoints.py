"""Every entry point takes every kind of endpoint (issue 18): the CLI and the Spark source and
sink with a ``redis+sentinel://`` URL (the sink across a failover), the CLI with ``--cluster``
and several seeds one of which is dead.
Real servers, Sentinels and a real SparkSession started by the suite."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from readergroup import EventStreamClientFactory, ScalingPolicy, StreamConfiguration, StreamManager
from readergroup.core.errors import EmbeddedRedisError
from readergroup.testing.embedded_redis import (
    LocalRedisCluster,
    LocalSentinelGroup,
    local_redis_cluster,
    local_sentinel_group,
)
from tests.support.cli import as_json, cli


@pytest.fixture(scope="module")
def sentinels() -> Iterator[LocalSentinelGroup]:
    try:
        with local_sentinel_group(replicas=1, sentinels=3) as group:
            yield group
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local Sentinel group is required: {exc}", pytrace=False)


def dead_port() -> int:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_cli_takes_a_sentinel_url(sentinels: LocalSentinelGroup, unique_name: str) -> None:
    url = sentinels.url
    name = f"{unique_name}/orders"
    assert as_json(url, "stream", "create", name, "--segments", "2")["created"] is True
    assert as_json(url, "stream", "write", name, "--count", "30")["written"] == 30
    info = as_json(url, "stream", "describe", name)
    assert sum(s["tail"] for s in info["segments"]) == 30


def test_the_cli_takes_cluster_seeds_past_a_dead_one(unique_name: str) -> None:
    try:
        with local_redis_cluster() as cluster:
            run_cli_on_cluster(cluster, unique_name)
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local Redis Cluster is required: {exc}", pytrace=False)


def run_cli_on_cluster(cluster: LocalRedisCluster, scope: str) -> None:
    url = f"redis://127.0.0.1:{dead_port()},127.0.0.1:{cluster.nodes[1].port}/0"
    name = f"{scope}/orders"
    refused = cli(url, "stream", "create", name, ok=False)
    assert refused.returncode == 1 and "--cluster" in refused.stderr
    assert as_json(url, "--cluster", "stream", "create", name, "--segments", "3")["created"]
    assert as_json(url, "stream", "write", name, "--count", "30", "--cluster")["written"] == 30
    info = as_json(url, "--cluster", "stream", "describe", name)
    assert sum(s["tail"] for s in info["segments"]) == 30


@pytest.mark.long  # about 22 s: a SparkSession and 3 Sentinels (clients: in make test)
def test_the_spark_source_takes_a_sentinel_url(
    spark: Any, sentinels: LocalSentinelGroup, unique_name: str
) -> None:
    name = f"{unique_name}/orders"
    cli(sentinels.url, "stream", "create", name, "--segments", "2")
    cli(sentinels.url, "stream", "write", name, "--count", "25")
    frame = (
        spark.read.format("readergroup")
        .option("redis_url", sentinels.url)
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
