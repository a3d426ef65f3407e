"""``readergroup metrics serve``: a Prometheus endpoint scraped over HTTP and parsed with
prometheus_client's own parser; and the library hook in an application's registry."""

from __future__ import annotations

import re
import signal
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from readergroup import EventStreamClientFactory, UTF8StringSerializer
from readergroup.admin.metrics import register_metrics
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES
from readergroup.core.names import group_sync_name
from readergroup.storage.connection import RedisConnection
from tests.support.cli import Service, as_json, cli
from tests.support.waiting import wait_until


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """name and sorted labels -> value, for every sample of an exposition text."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(scraped: dict[Any, float], name: str, **labels: str) -> float:
    return scraped[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def endpoint(redis_url: str, scope: str) -> Iterator[str]:
    args = ["metrics", "serve", "--port", "0", "--addr", "127.0.0.1", "--scope", scope]
    server = Service(redis_url, *args)
    try:
        wait_until(lambda: server.printed("/metrics"), what="the metrics endpoint")
        yield re.findall(r"http://\S+/metrics", "".join(server.stdout))[0]
    finally:
        code = server.stop(signal.SIGINT)
        assert code == 0 and "Traceback" not in "".join(server.stderr), server.stderr


def scrape(url: str) -> dict[Any, float]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return samples(response.read().decode())


def test_metrics_serve_exposes_lag_positions_readers_and_errors(
    redis_url: str, scope: str, endpoint: str
) -> None:
    stream = f"{scope}/orders"
    cli(redis_url, "stream", "create", stream, "--segments", "2")
    cli(redis_url, "stream", "write", stream, "--count", "30")
    cli(redis_url, "group", "create", f"{scope}/billing", "--stream", stream)
    g = {"scope": scope, "group": "billing"}
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        reader: Any = factory.create_reader("r1", "billing", UTF8StringSerializer())
        read = 0
        while read < 12:
            read += reader.read_next_event(timeout=1).event is not None
        reader.commit()
        scraped = scrape(endpoint)
        described = as_json(redis_url, "group", "describe", f"{scope}/billing")
        for row in described["segments"]:
            labels = {**g, "stream": stream, "segment": str(row["segment"])}
            assert value(scraped, "readergroup_segment_position", **labels) == row["position"]
            assert value(scraped, "readergroup_segment_tail", **labels) == row["tail"]
            assert value(scraped, "readergroup_segment_lag_events", **labels) == row["lag_events"]
            assert value(scraped, "readergroup_segment_lag_bytes", **labels) >= 0
            assert value(scraped, "readergroup_segment_lag_seconds", **labels) >= 0
        assert value(scraped, "readergroup_group_lag_events", **g) == 30 - 12
        assert value(scraped, "readergroup_group_readers_online", **g) == 1
        assert value(scraped, "readergroup_group_readers_fenced", **g) == 0
        assert value(scraped, "readergroup_group_state", **g, state="stable") == 1
        assert value(scraped, "readergroup_group_rebalances_total", **g) == 1
        assert value(scraped, "readergroup_group_segment_acquisitions_total", **g) == 2
        reader.close()
    cli(redis_url, "group", "reset", f"{scope}/billing", "--to-latest", "--execute")
    scraped = scrape(endpoint)
    assert value(scraped, "readergroup_group_lag_events", **g) == 0
    assert value(scraped, "readergroup_group_resets_total", **g) == 1
    assert value(scraped, "readergroup_group_state", **g, state="empty") == 1
    assert value(scraped, "readergroup_up") == 1
    assert (("readergroup_scrape_errors_total", (("scope", scope),))) not in scraped
    connection = RedisConnection.from_url(redis_url)  # the group's state vanishes under us
    try:
        connection.synchronizer(
            group_sync_name(scope, "billing"), UPDATE_TYPES, STATE_TYPES
        ).delete()
        scraped = scrape(endpoint)
        assert value(scraped, "readergroup_scrape_errors_total", scope=scope) == 1
        assert value(scraped, "readergroup_up") == 1, "the endpoint still serves"
        assert not any(name.startswith("readergroup_segment") for name, _ in scraped)
    finally:
        connection.close()


def test_the_library_hook_registers_the_same_metrics_in_an_app_registry(
    redis_url: str, scope: str
) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders")
    cli(redis_url, "stream", "write", f"{scope}/orders", "--count", "7")
    cli(redis_url, "group", "create", f"{scope}/g", "--stream", f"{scope}/orders")
    registry = CollectorRegistry()
    connection = RedisConnection.from_url(redis_url)
    try:
        collector = register_metrics(registry, connection, [scope])
        scraped = samples(generate_latest(registry).decode())
        labels = {"scope": scope, "group": "g", "stream": f"{scope}/orders", "segment": "0"}
        assert value(scraped, "readergroup_segment_lag_events", **labels) == 7
        registry.unregister(collector)
        assert generate_latest(registry) == b""
    finally:
        connection.close()
