"""Streams, a state synchronizer and a reader group on a real local 3-master Redis Cluster."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster

from readergroup import (
    AccessDeniedError,
    ClientConfig,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UnsafeServerConfigError,
    UTF8StringSerializer,
)
from readergroup.admin import acl
from readergroup.core.errors import EmbeddedRedisError
from readergroup.storage.connection import RedisConnection
from readergroup.testing.embedded_redis import LocalRedisCluster, local_redis_cluster
from tests.support.model import ALL_TYPES, Add

CLUSTER = ClientConfig(cluster=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    try:
        with local_redis_cluster(3) as started:
            yield started
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local Redis Cluster is required: {exc}", pytrace=False)


@pytest.mark.redis
def test_the_keys_of_a_segment_and_of_a_synchronizer_share_a_slot(
    cluster: LocalRedisCluster,
) -> None:
    connection = RedisConnection.from_url(cluster.url, CLUSTER)
    slots = {connection.client.keyslot(k) for k in connection.keys.segment("a", "b", 7)}
    assert len(slots) == 1
    layout = connection.log_backend.keys("group:a/g")
    assert len({connection.client.keyslot(k) for k in layout.all}) == 1
    spread = {connection.client.keyslot(connection.keys.segment("a", "b", s)[0]) for s in range(16)}
    assert len(spread) > 8  # segments spread over the cluster
    connection.close()


@pytest.mark.redis
def test_a_synchronizer_on_the_cluster(cluster: LocalRedisCluster) -> None:
    connection = RedisConnection.from_url(cluster.url, CLUSTER)
    sync = connection.synchronizer("counter-on-cluster", ALL_TYPES)
    sync.initialize({"total": 0})
    for _ in range(20):
        sync.update_state(lambda s: [Add(1)])
    other = connection.synchronizer("counter-on-cluster", ALL_TYPES)
    other.fetch_updates()
    assert other.state == {"total": 20}
    assert other.wait_for_updates(0.1) is False
    sync.compact()
    connection.close()


@pytest.mark.redis
def test_writers_and_a_reader_group_on_the_cluster(cluster: LocalRedisCluster) -> None:
    url = cluster.url
    with StreamManager.from_url(url, CLUSTER) as sm:
        sm.create_scope("cl")
        sm.create_stream("cl", "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(6)))
    with ReaderGroupManager.from_url("cl", url, CLUSTER) as rgm:
        rgm.create_reader_group(
            "g",
            ReaderGroupConfig(
                streams=["cl/s"],
                heartbeat_interval=0.3,
                session_timeout=2.0,
                group_refresh_time=0.1,
            ),
        )
    got: dict[str, list[Any]] = defaultdict(list)
    stop = threading.Event()

    def read(name: str) -> None:
        with EventStreamClientFactory.from_url("cl", url, CLUSTER) as factory:
            reader = factory.create_reader(name, "g", UTF8StringSerializer())
            while not stop.is_set():
                got[name] += reader.read_batch(200, timeout=0.2)
            reader.close()

    threads = [threading.Thread(target=read, args=(f"r{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    with EventStreamClientFactory.from_url("cl", url, CLUSTER) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        for i in range(1500):
            writer.write_event(f"k{i % 30}:{i}", routing_key=f"k{i % 30}")
        writer.flush()
        with StreamManager.from_url(url, CLUSTER) as sm:
            sm.scale_stream("cl", "s", [0], [(0.0, 1 / 12), (1 / 12, 1 / 6)])
        for i in range(1500, 2500):
            writer.write_event(f"k{i % 30}:{i}", routing_key=f"k{i % 30}")
        writer.close()
    deadline = time.monotonic() + 60
    while sum(len(v) for v in got.values()) < 2500 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(30)
    events = [e for v in got.values() for e in v]
    assert sorted(int(e.event.split(":")[1]) for e in events) == list(range(2500))
    per_key: dict[str, list[int]] = defaultdict(list)
    for e in events:
        per_key[e.routing_key].append(int(e.event.split(":")[1]))
    for name, reads in got.items():
        mine: dict[str, list[int]] = defaultdict(list)
        for e in reads:
            mine[e.routing_key].append(int(e.event.split(":")[1]))
        assert all(seq == sorted(seq) for seq in mine.values()), name


@pytest.mark.redis
def test_the_generated_cluster_rules_on_every_node(cluster: LocalRedisCluster) -> None:
    url = cluster.url
    with StreamManager.from_url(url, CLUSTER) as sm:
        for scope in ("aclmine", "acltheirs"):
            sm.create_scope(scope)
            sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))
    with ReaderGroupManager.from_url("aclmine", url, CLUSTER) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=["aclmine/s"]))
    for node in cluster.nodes:  # ACLs are per node
        client = redis.Redis.from_url(node.url)
        for role in ("writer", "reader"):
            rules = acl.rules(role, "aclmine", cluster=True)
            client.execute_command(*rules.setuser_args(f"cl-{role}", "pw"))
        client.close()

    def config(role: str) -> ClientConfig:
        return ClientConfig(
            cluster=True, redis_options={"username": f"cl-{role}", "password": "pw"}
        )

    with EventStreamClientFactory.from_url("aclmine", url, config("writer")) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        for i in range(20):
            writer.write_event(f"e{i}", routing_key=f"k{i}")
        writer.close()
    with EventStreamClientFactory.from_url("aclmine", url, config("reader")) as factory:
        reader = factory.create_reader("r", "g", UTF8StringSerializer())
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += reader.read_batch(20, timeout=0.2)
        reader.close()
    assert sorted(e.event for e in got) == sorted(f"e{i}" for i in range(20))
    theirs = EventStreamClientFactory.from_url("acltheirs", url, config("writer"))
    with theirs, pytest.raises(AccessDeniedError):
        theirs.create_event_writer("s", UTF8StringSerializer())


def test_several_seeds_get_past_a_dead_one(cluster: LocalRedisCluster) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    url = f"redis://127.0.0.1:{dead},127.0.0.1:{cluster.nodes[1].port}/0"
    with StreamManager.from_url(url, CLUSTER) as sm:
        scope = f"seeds{uuid.uuid4().hex[:6]}"
        sm.create_scope(scope)
        assert scope in sm.list_scopes()


@pytest.mark.redis
def test_every_cluster_node_is_checked_for_an_evicting_policy(cluster: LocalRedisCluster) -> None:
    raw = redis.cluster.RedisCluster.from_url(cluster.url)
    last = raw.get_primaries()[-1]
    raw.config_set("maxmemory-policy", "allkeys-lru", target_nodes=last)
    try:
        with pytest.raises(UnsafeServerConfigError, match="allkeys-lru"):
            RedisConnection.from_url(cluster.url, CLUSTER)  # connects to every primary
    finally:
        raw.config_set("maxmemory-policy", "noeviction", target_nodes=last)
        raw.close()
