"""Reader groups across a lossy failover of their state log (issue 18): readers resync and
rejoin by themselves, nothing acknowledged-and-present is skipped. The failover is simulated by
rolling the group's log back to a copy taken earlier (what a promoted replica that missed the
latest writes serves)."""

from __future__ import annotations

import time
from typing import Any

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.core.names import group_sync_name
from statesync.redis_backend import RedisLogBackend
from tests.support.failover import remember

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.1}


def write(factory: EventStreamClientFactory, names: list[str]) -> None:
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i, name in enumerate(names):
            writer.write_event(name, routing_key=f"k{i % 16}")


def read_until(
    readers: list[Any], wanted: set[str], timeout: float, until: Any = lambda: True
) -> set[str]:
    """Read round-robin from every reader until ``wanted`` is seen and ``until()`` holds;
    raises what a read raises."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while not (wanted <= seen and until()) and time.monotonic() < deadline:
        for reader in readers:
            for event in reader.read_batch(100, timeout=0.05):
                seen.add(event.event)
    return seen


def both_own_segments(r1: Any, r2: Any) -> bool:
    return bool(r1.owned_segments()) and bool(r2.owned_segments())


def test_readers_resync_and_rejoin_after_the_group_log_loses_writes(
    redis_url: str, scope: str
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(
            scope, "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
        )
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("billing", ReaderGroupConfig(streams=[f"{scope}/orders"], **FAST))
    log = RedisLogBackend.from_url(redis_url, key_prefix="rg")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        first = [f"a{i}" for i in range(40)]
        write(factory, first)
        r1 = factory.create_reader("r1", "billing", UTF8StringSerializer())
        assert read_until([r1], set(first), 20) >= set(first)
        failover = remember(log, group_sync_name(scope, "billing"))
        r2 = factory.create_reader("r2", "billing", UTF8StringSerializer())
        second = [f"b{i}" for i in range(40)]
        write(factory, second)
        read_until([r1, r2], set(second), 20, lambda: both_own_segments(r1, r2))
        failover()  # r2's join, the rebalance and the commits since are gone
        began = time.monotonic()  # several refreshes and heartbeats meet the regressed log
        read_until([r1, r2], set(), 20, lambda: time.monotonic() - began > 1.0)
        third = [f"c{i}" for i in range(40)]
        write(factory, third)
        seen = read_until([r1, r2], set(third), 30, lambda: both_own_segments(r1, r2))
        assert set(third) <= seen
        assert both_own_segments(r1, r2)
        r1.close()
        r2.close()
    log.close()
