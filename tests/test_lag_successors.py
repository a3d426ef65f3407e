"""Lag counts every unread event, the successors' included (issue 32 item 5): a stream that
split twice (a successor of a successor) read by a group, then reset to earliest. The API, ``group
list``, ``group describe``, ``group watch`` and the Prometheus metric all say exactly how many
events are unread."""

from __future__ import annotations

import json
import re
import time

from prometheus_client import CollectorRegistry, generate_latest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin.metrics import register_metrics
from readergroup.storage.connection import RedisConnection
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
    url_factory_fixture,  # noqa: F401 (a fixture)
)
from tests.support.cli import invoke
from tests.test_cli_metrics import samples, value

WRITES = (40, 60, 50)
"""Events written before the first split, between the splits, after the second."""
FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.05}


def lag_everywhere(redis_url: str, scope: str) -> dict[str, int]:
    """The group's lag in events as each surface reports it."""
    name = f"{scope}/billing"
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        metrics = rgm.get_reader_group("billing").get_metrics()
    listed = json.loads(invoke(redis_url, "group", "list", scope, "--json"))["groups"]
    described = json.loads(invoke(redis_url, "group", "describe", name, "--json"))
    watched = invoke(redis_url, "group", "watch", name, "--iterations", "0")
    registry = CollectorRegistry()
    connection = RedisConnection.from_url(redis_url)
    try:
        register_metrics(registry, connection, [scope])
        scraped = samples(generate_latest(registry).decode())
    finally:
        connection.close()
    return {
        "api total": metrics.total.events,
        "api segments": sum(row.lag.events for row in metrics.segments),
        "group list": listed[0]["lag_events"],
        "group describe": described["total_lag"]["events"],
        "describe rows": sum(row["lag_events"] for row in described["segments"]),
        "watch": int(re.findall(r"lag (\d+) events", watched)[0]),
        "prometheus": int(
            value(scraped, "readergroup_group_lag_events", scope=scope, group="billing")
        ),
    }


def write(factory: EventStreamClientFactory, count: int) -> None:
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i in range(count):
            writer.write_event(f"k{i}", f"e{i}")
        writer.flush()


@flavoured_on_redis("sync", "async")
def test_lag_counts_successors_after_splits_and_a_reset_to_earliest(
    redis_url: str, scope: str, manager: StreamManager, factory: EventStreamClientFactory
) -> None:
    two = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))
    manager.create_stream(scope, "orders", two)
    write(factory, WRITES[0])
    first = manager.scale_stream(scope, "orders", [0], [(0.0, 0.25), (0.25, 0.5)])
    write(factory, WRITES[1])
    manager.scale_stream(scope, "orders", [first[0]], [(0.0, 0.125), (0.125, 0.25)])
    write(factory, WRITES[2])  # a successor's successors
    total = sum(WRITES)
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        config = ReaderGroupConfig(streams=(f"{scope}/orders",), start="head", **FAST)
        rgm.create_reader_group("billing", config)
        group = rgm.get_reader_group("billing")
        assert group.get_metrics().total.events == total
        with factory.create_reader("r1", "billing", UTF8StringSerializer()) as reader:
            read, deadline = 0, time.monotonic() + 30
            while read < total:
                assert time.monotonic() < deadline, f"read {read} of {total}"
                read += reader.read_next_event(timeout=0.5).event is not None
            reader.commit()
            assert group.get_metrics().total.events == 0

    invoke(redis_url, "group", "reset", f"{scope}/billing", "--to-earliest", "--execute")
    assert set(lag_everywhere(redis_url, scope).values()) == {total}
