"""Durable acknowledgement modes (issue 18): leader, replicas=N (WAIT), fsync (WAITAOF), for
writer appends and state-log appends, on real servers (a primary with a real replica)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from readergroup import (
    AckUnsupportedError,
    ClientConfig,
    EventStreamClientFactory,
    EventWriterConfig,
    InvalidConfigError,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
    WriteFailedError,
)
from readergroup.core.errors import AckTimeoutError
from readergroup.testing.embedded_redis import LocalRedisServer, local_redis_server
from statesync import Acks, RetryPolicy, StateSynchronizer, SyncConfig
from statesync import AckTimeoutError as SyncAckTimeoutError
from statesync import AckUnsupportedError as SyncAckUnsupportedError
from statesync.redis_backend import RedisLogBackend
from tests.support.model import ALL_TYPES, Add
from tests.support.waiting import wait_until


@pytest.fixture
def replicated() -> Iterator[tuple[LocalRedisServer, LocalRedisServer]]:
    """A primary (append-only file on) and one replica following it."""
    with local_redis_server(persistent=True) as primary, local_redis_server() as replica:
        client = redis.Redis(port=replica.port)
        client.replicaof("127.0.0.1", primary.port)
        wait_until(
            lambda: client.info("replication").get("master_link_status") == "up",
            30,
            "the replica to sync",
        )
        client.close()
        yield primary, replica


@pytest.mark.parametrize(
    "acks", ["replicas=0", "replicas=x", "replicas", "quorum", "leader=1", "fsync=2"]
)
def test_bad_ack_modes_are_refused(acks: str) -> None:
    with pytest.raises(InvalidConfigError):
        ClientConfig(acks=acks)


def test_ack_modes_parse() -> None:
    assert ClientConfig(acks="replicas=2", ack_timeout=0.5).durability == Acks(
        mode="replicas", replicas=2, timeout=0.5
    )
    assert str(ClientConfig(acks="fsync").durability) == "fsync"
    with pytest.raises(InvalidConfigError):
        ClientConfig(ack_timeout=0)


def write_one(url: str, config: ClientConfig, delivery_timeout: float = 10.0) -> Any:
    with StreamManager.from_url(url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "orders", StreamConfiguration())
    with EventStreamClientFactory.from_url("ha", url, config) as factory:
        writer = factory.create_event_writer(
            "orders",
            UTF8StringSerializer(),
            EventWriterConfig(delivery_timeout=delivery_timeout),
        )
        try:
            return writer.write_event("durable", routing_key="k").result(30)
        finally:
            writer.close()


def stream_length(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return sum(client.xlen(key) for key in client.scan_iter("rg:{ha/orders/*}:events"))
    finally:
        client.close()


def test_replicas_mode_acknowledges_once_a_replica_has_the_events(
    replicated: tuple[LocalRedisServer, LocalRedisServer],
) -> None:
    primary, replica = replicated
    pointer = write_one(primary.url, ClientConfig(acks="replicas=1"))
    assert pointer.offset == 0
    assert stream_length(replica.url) == 1  # on the replica when acknowledged


def test_replicas_mode_without_enough_replicas_fails_retriably_and_never_doubles(
    private_redis: LocalRedisServer,
) -> None:
    config = ClientConfig(acks="replicas=1", ack_timeout=0.05)
    with pytest.raises(WriteFailedError) as caught:
        write_one(private_redis.url, config, delivery_timeout=0.5)
    assert isinstance(caught.value.__cause__, AckTimeoutError)
    assert caught.value.retriable and caught.value.__cause__.retriable
    assert stream_length(private_redis.url) == 1  # landed on the primary once, re-sent as dups


def test_fsync_mode_waits_for_the_append_only_file(private_valkey: LocalRedisServer) -> None:
    assert write_one(private_valkey.url, ClientConfig(acks="fsync")).offset == 0


def test_fsync_mode_without_an_append_only_file_is_a_clear_error(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert client.config_get("appendonly")["appendonly"] == "no"
    client.close()
    with (
        local_redis_server() as server,
        pytest.raises(AckUnsupportedError, match="appendonly yes") as caught,
    ):
        write_one(server.url, ClientConfig(acks="fsync"))
    assert not caught.value.retriable


def test_state_log_appends_honour_the_ack_mode(
    replicated: tuple[LocalRedisServer, LocalRedisServer], unique_name: str
) -> None:
    primary, replica = replicated
    config = SyncConfig(acks=Acks.parse("replicas=1"))
    with StateSynchronizer.from_url(
        primary.url, unique_name, update_types=ALL_TYPES, config=config
    ) as sync:
        sync.initialize({"total": 0})
        sync.update_state(lambda s: [Add(1)])
    backend = RedisLogBackend.from_url(replica.url)
    assert backend.read(unique_name, 0, 10).head_revision == 1  # on the replica when acked
    backend.close()


def test_state_log_append_without_replicas_times_out_retriably_and_lands_once(
    private_redis: LocalRedisServer, unique_name: str
) -> None:
    config = SyncConfig(
        acks=Acks.parse("replicas=1", timeout=0.02),
        retry=RetryPolicy(max_attempts=3, deadline=5.0),
    )
    with StateSynchronizer.from_url(
        private_redis.url, unique_name, update_types=ALL_TYPES, config=config
    ) as sync:
        sync.initialize({"total": 0})
        with pytest.raises(SyncAckTimeoutError) as caught:
            sync.update_state(lambda s: [Add(1)])
        assert caught.value.retriable
    backend = RedisLogBackend.from_url(private_redis.url)
    assert backend.read(unique_name, 0, 10).head_revision == 1  # landed once
    backend.close()


def test_state_log_fsync_without_an_append_only_file_is_a_clear_error(
    unique_name: str,
) -> None:
    config = SyncConfig(acks=Acks.parse("fsync"))
    with (
        local_redis_server() as server,
        StateSynchronizer.from_url(
            server.url, unique_name, update_types=ALL_TYPES, config=config
        ) as sync,
    ):
        sync.initialize({"total": 0})
        with pytest.raises(SyncAckUnsupportedError, match="appendonly"):
            sync.update_state(lambda s: [Add(1)])
