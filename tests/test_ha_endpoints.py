"""Every entry point takes every kind of endpoint (issue 18): the CLI with a
``redis+sentinel://`` URL, and with ``--cluster`` and several seeds one of which is dead (the
Spark source and sink: tests/test_spark_endpoints.py). Real servers and Sentinels started by
the suite."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

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
