"""Sentinel and Cluster seeds (issue 18): ``redis+sentinel://`` URLs for every client, a forced
failover under a writer and readers, several Cluster seed URLs. Real servers and Sentinels
(``valkey-server --sentinel``) started by the test."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from readergroup import (
    ClientConfig,
    EventStreamClientFactory,
    InvalidConfigError,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.testing.embedded_redis import LocalSentinelGroup, local_sentinel_group
from statesync import StateSynchronizer
from statesync.endpoints import parse_sentinel_url
from statesync.errors import EndpointURLError
from statesync.redis_backend import RedisLogBackend, recheck_primary, sentinel_clients
from tests.support.model import ALL_TYPES, Add
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 10.0, "group_refresh_time": 0.1}


@pytest.fixture
def sentinels() -> Iterator[LocalSentinelGroup]:
    with local_sentinel_group(replicas=1, sentinels=3) as group:
        yield group


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://h:1",
        "redis+sentinel://h:1/",
        "redis+sentinel://h:x/svc",
        "redis+sentinel://h:1/svc/db",
        "redis+sentinel://h:1/svc/0/extra",
        "redis://h:1/svc",
    ],
)
def test_bad_sentinel_urls_are_named(url: str) -> None:
    with pytest.raises(EndpointURLError, match="h"):
        parse_sentinel_url(url)


def test_a_bad_sentinel_url_is_a_config_error_for_clients() -> None:
    with pytest.raises(InvalidConfigError, match="service_name"):
        StreamManager.from_url("redis+sentinel://127.0.0.1:1")


@pytest.mark.long  # about 25 s; make test keeps the reader group's Sentinel failover
def test_clients_follow_a_sentinel_failover(
    sentinels: LocalSentinelGroup, unique_name: str
) -> None:
    url = sentinels.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    config = ClientConfig(acks="replicas=1", ack_timeout=1.0)
    with EventStreamClientFactory.from_url("ha", url, config) as factory:
        writer = factory.create_event_writer("orders", UTF8StringSerializer())
        for i in range(10):
            writer.write_event(f"a{i}", routing_key=f"k{i}").result(30)
        sentinels.failover()
        for i in range(10):  # retried onto the new primary once a replica follows it
            writer.write_event(f"b{i}", routing_key=f"k{i}").result(60)
        writer.close()
        batch = factory.create_batch_client()
        stored = {
            event.payload.decode()
            for segment in (0, 1)
            for events in batch.read_segment("orders", segment)
            for event in events
        }
    assert stored == {f"{p}{i}" for p in "ab" for i in range(10)}
    with StateSynchronizer.from_url(url, unique_name, update_types=ALL_TYPES) as sync:
        sync.initialize({"total": 0})
        sync.update_state(lambda s: [Add(1)])
        wait_until(
            lambda: redis.Redis(port=sentinels.replicas[0].port).exists(
                f"statesync:{{{unique_name}}}:meta"
            ),
            10,
            "replication",
        )
        sentinels.failover()  # back to the first primary
        sync.update_state(lambda s: [Add(1)])  # retried onto the new primary
        assert sync.state["total"] == 2


@pytest.mark.long  # about 24 s: waits for the Sentinels to demote the old primary (test-long)
def test_clients_leave_the_old_primary_as_soon_as_the_sentinels_switch(
    sentinels: LocalSentinelGroup, unique_name: str
) -> None:
    """After a Sentinel failover the old primary stays a writable primary for seconds, until
    the Sentinels turn it into a replica: whatever a client writes there meanwhile is lost.
    Clients ask the Sentinels again (every second at most) and drop connections to it."""
    backend = RedisLogBackend.from_url(sentinels.url)
    client = backend.client

    def server_port() -> int:
        return int(client.config_get("port")["port"])

    assert server_port() == sentinels.primary.port
    promoted = sentinels.failover()
    wait_until(lambda: server_port() == promoted, 5, "the client to follow the switch")
    with StateSynchronizer(backend, unique_name, update_types=ALL_TYPES) as sync:
        sync.initialize({"total": 0})
        sync.update_state(lambda s: [Add(1)])  # acks=leader: on the new primary, not lost
    sentinels.wait_replicating()  # the old primary is a replica now: its split-brain writes gone
    with StateSynchronizer.from_url(sentinels.url, unique_name, update_types=ALL_TYPES) as sync:
        sync.fetch_updates()
        assert sync.state == {"total": 1}
    backend.close()


def test_a_blocking_read_leaves_the_old_primary_when_another_pool_learns_of_the_switch(
    sentinels: LocalSentinelGroup,
) -> None:
    """A client's blocking reads have a pool of their own, which asks the Sentinels only when
    it hands out a connection. A read blocked on the old primary must not wait there (up to its
    block time, or until the Sentinels demote that server) once the command pool has learned of
    the switch: the blocking pool follows at once and the blocked read fails over with a
    connection error (retriable). The read waits as a reader's parked read does (sent, then
    polled), and its connection is shut down, not closed under it: closing it from another
    thread made the poll end in a ``TypeError`` inside redis-py, which killed readers."""
    client, blocking = sentinel_clients(
        sentinels.url, socket_timeout=5.0, blocking_socket_timeout=60.0
    )
    old = sentinels.primary_port()
    client.ping()
    outcome: list[BaseException | None] = []

    def parked_read() -> None:
        pool = blocking.connection_pool
        connection = pool.get_connection()
        try:
            connection.send_command("XREAD", "BLOCK", 30_000, "STREAMS", "nothing-comes", "$")
            connection.can_read(30)
            connection.read_response()
            outcome.append(None)
        except BaseException as exc:  # recorded, asserted on below
            outcome.append(exc)
            connection.disconnect()
        finally:
            pool.release(connection)

    reader = threading.Thread(target=parked_read, daemon=True)
    reader.start()
    old_server = redis.Redis(port=old)
    wait_until(lambda: old_server.info("clients")["blocked_clients"] == 1, 10, "a blocked read")
    promoted = sentinels.failover()
    new = ("127.0.0.1", promoted)

    def command_pool_follows() -> bool:
        recheck_primary(client)  # as on a WAIT shortfall; the Sentinels announce it shortly
        return bool(client.connection_pool.master_address == new)

    wait_until(command_pool_follows, 30, "the command pool to learn of the switch")
    assert blocking.connection_pool.master_address == new  # told, not asked
    reader.join(5)
    assert not reader.is_alive()
    assert isinstance(outcome[0], redis.ConnectionError), repr(outcome[0])
    assert old_server.info("clients")["blocked_clients"] == 0
    assert int(blocking.config_get("port")["port"]) == promoted  # the next command: new primary
    client.close()
    blocking.close()
    old_server.close()
