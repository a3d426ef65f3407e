"""Coming back after a graceful ``SENTINEL FAILOVER`` with ``acks=replicas=1`` (issue 18).

Where the time goes (measured, one replica, Valkey 8.1): the Sentinels promote the replica in
~1 s; the old primary, now without a replica, stays a writable primary until the Sentinels
reconfigure it, ~10 s after the switch (Sentinel waits 8 s after a demoted primary still reports
itself a primary, then acts on its next ``INFO``, sent every 10 s); it then needs a full resync
(it took writes after the promotion), which ``repl-diskless-sync-delay`` (default 5 s) delays.
Until then no append can be replicated, so none is acknowledged: the writer waits by design.
What the client adds must stay small: it leaves the demoted primary at its first ``WAIT``
shortfall, and delivers again within a bound of the configured timeouts once a replica follows
the new primary. Real servers and Sentinels started by the suite."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from readergroup import (
    AckTimeoutError,
    ClientConfig,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.core.errors import EmbeddedRedisError
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch
from readergroup.testing.embedded_redis import LocalSentinelGroup, local_sentinel_group
from statesync import RetryPolicy, StateSynchronizer, SyncConfig
from statesync import redis_backend as backend_module
from statesync.durability import Acks
from statesync.errors import AckTimeoutError as SyncAckTimeoutError
from statesync.redis_backend import SENTINEL_CHECK_INTERVAL, RedisLogBackend
from tests.support.model import ALL_TYPES, Add
from tests.support.waiting import wait_until
from tools.ha_run import HaRun

SESSION = 3.0
ACK_TIMEOUT = 0.5
WRITER_MAX_BACKOFF = 1.0
"""The writer's cap on one backoff (``EventStreamWriter``'s retry policy)."""


@pytest.fixture
def sentinels() -> Iterator[LocalSentinelGroup]:
    try:
        with local_sentinel_group(replicas=1, sentinels=3) as group:
            yield group
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local Sentinel group is required: {exc}", pytrace=False)


def port_of(client: redis.Redis) -> int:
    return int(client.config_get("port")["port"])


def has_an_online_replica(client: redis.Redis) -> bool:
    """The server has a replica past its initial sync (so ``WAIT 1`` can succeed)."""
    info = client.info("replication")
    return any(
        isinstance(value, dict) and value.get("state") == "online"
        for name, value in info.items()
        if name.startswith("slave")
    )


@pytest.fixture
def no_periodic_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a sign of a demotion may make a pool ask the Sentinels (not the periodic ask)."""
    monkeypatch.setattr(backend_module, "SENTINEL_CHECK_INTERVAL", 3600.0)


@pytest.mark.usefixtures("no_periodic_asking")
def test_a_wait_shortfall_sends_the_next_append_to_the_primary_the_sentinels_name(
    sentinels: LocalSentinelGroup, unique_name: str
) -> None:
    """After the promotion the old primary has no replica: a ``WAIT 1`` there falls short. The
    pool asks the Sentinels at once (it used to wait for its periodic question, up to a second,
    or for the old primary's ``READONLY`` ~10 s later), so the retry goes to the new primary."""
    backend = RedisLogBackend.from_url(sentinels.url, acks=Acks.parse("replicas=1", timeout=0.2))
    config = SyncConfig(retry=RetryPolicy(max_attempts=1))
    with StateSynchronizer(backend, unique_name, update_types=ALL_TYPES, config=config) as sync:
        sync.initialize({"total": 0})
        old = sentinels.primary.port
        assert port_of(backend.client) == old
        promoted = sentinels.failover()
        assert port_of(backend.client) == old  # nothing asked the Sentinels yet
        with pytest.raises(SyncAckTimeoutError, match="0 of 1 replicas"):
            sync.update_state(lambda s: [Add(1)])  # landed on the old primary, unreplicated
        assert port_of(backend.client) == promoted
    backend.close()


@pytest.mark.usefixtures("no_periodic_asking")
def test_a_writer_append_falling_short_moves_to_the_new_primary(
    sentinels: LocalSentinelGroup, scope: str
) -> None:
    url = sentinels.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    connection = RedisConnection.from_url(url, ClientConfig(acks="replicas=1", ack_timeout=0.2))
    old = sentinels.primary.port
    assert port_of(connection.client) == old
    promoted = sentinels.failover()
    batch = AppendBatch.of(scope, "s", 0, "w", 1, [(None, b"x", 0)], 1 << 20)
    with pytest.raises(AckTimeoutError, match="0 of 1 replicas"):
        connection.segments.append([batch])
    assert port_of(connection.client) == promoted
    connection.close()


@pytest.mark.long  # about 30 s: the Sentinels reconfigure the demoted primary ~10 s after
@pytest.mark.slow
@pytest.mark.redis
def test_replicas_1_readers_and_writer_come_back_once_a_replica_follows_the_new_primary(
    sentinels: LocalSentinelGroup,
) -> None:
    """Readers deliver new acknowledged events again within the session timeout plus the time
    the servers take to be able to acknowledge again (a replica following the new primary),
    plus what a client waits by configuration: a ``WAIT`` in flight, one writer backoff and the
    pools' periodic question to the Sentinels."""
    run = HaRun(
        sentinels.url,
        readers=3,
        segments=4,
        client=ClientConfig(acks="replicas=1", ack_timeout=ACK_TIMEOUT),
        group={"session_timeout": SESSION},
        pause=0.05,
    )
    run.start()
    began = time.monotonic()
    with run.failover():
        promoted = sentinels.failover()
    with redis.Redis(port=promoted, socket_timeout=1) as new_primary:
        wait_until(lambda: has_an_online_replica(new_primary), 120, "the old primary to follow")
    servers_back = time.monotonic() - began
    bound = servers_back + SESSION + ACK_TIMEOUT + WRITER_MAX_BACKOFF + SENTINEL_CHECK_INTERVAL
    comeback = run.wait_comeback(bound + 60)
    figures = run.finish()
    assert figures.skipped == 0 and figures.divergences == 0 and figures.overlaps == 0, figures
    assert figures.removals == 0, figures.removal_reasons
    assert figures.lost == 0 and figures.write_failures == 0, figures
    assert comeback <= bound, (comeback, servers_back)


@pytest.mark.long  # about 25 s
@pytest.mark.slow
@pytest.mark.redis
def test_the_timeline_shows_the_sentinels_demoting_the_old_primary_before_the_comeback() -> None:
    from tools import ha_timeline

    timeline = ha_timeline.run("replicas=1", replicas=1, sync_delay=0, lossy=False)
    events = timeline["events"]

    def first(source: str, text: str) -> float:
        return min(t for t, s, x in events if s.startswith(source) and text in x and t >= 0)

    switch = first("sentinel", "+switch-master")
    demoted = first("sentinel", "+convert-to-slave")
    assert first("client", "name a new primary") < demoted  # left the old one before that
    assert switch < demoted < timeline["comeback_seconds"]
    figures = timeline["figures"]
    assert figures["lost"] == 0 and figures["skipped"] == 0 and figures["write_failures"] == 0
