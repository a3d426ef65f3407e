"""Operating transactions (issue 31): ``readergroup txn list`` / ``abort`` as a real
subprocess, and the transaction metrics in an application's registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from readergroup import (
    EventStreamClientFactory,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.admin.metrics import register_metrics
from readergroup.core.errors import TransactionClosedError
from readergroup.storage.connection import RedisConnection
from tests.support.cli import as_json, refused
from tests.test_cli_metrics import samples, value
from tests.test_transactions import STREAM, new_writer


@pytest.fixture
def stream(manager: StreamManager, scope: str) -> str:
    manager.create_stream(scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    return STREAM


def test_txn_list_shows_open_transactions_and_txn_abort_aborts_one(
    factory: EventStreamClientFactory, stream: str, scope: str, redis_url: str
) -> None:
    writer = new_writer(factory, "ops")
    kept = writer.begin()
    for i in range(5):
        kept.write_event(b"x" * 10, routing_key=f"k{i}")
    kept.flush()
    doomed = writer.begin()
    doomed.write_event(b"y", routing_key="k")
    doomed.flush()
    done = writer.begin()
    done.commit()
    listed = as_json(redis_url, "txn", "list", f"{scope}/{stream}")
    rows = {row["id"]: row for row in listed["transactions"]}
    assert set(rows) == {kept.id, doomed.id}  # committed ones are not listed
    assert rows[kept.id]["events"] == 5 and rows[kept.id]["bytes"] == 50
    assert rows[kept.id]["status"] == "OPEN" and rows[kept.id]["transactional_id"] == "ops"
    assert 0 < rows[kept.id]["expires_in_seconds"] <= 60
    aborted = as_json(redis_url, "txn", "abort", f"{scope}/{stream}", doomed.id)
    assert aborted == {"id": doomed.id, "status": "ABORTED"}
    with pytest.raises(TransactionClosedError):  # its writer learns it at its next call
        doomed.commit()
    listed = as_json(redis_url, "txn", "list", f"{scope}/{stream}")
    assert [row["id"] for row in listed["transactions"]] == [kept.id]
    line = refused(redis_url, "txn", "abort", f"{scope}/{stream}", done.id)
    assert "COMMITTED" in line and done.id in line
    line = refused(redis_url, "txn", "abort", f"{scope}/{stream}", "nope")
    assert "does not exist" in line


def test_metrics_count_unfinished_transactions_and_the_oldest_age(
    factory: EventStreamClientFactory, stream: str, scope: str, redis_url: str
) -> None:
    writer = new_writer(factory, "m")
    first = writer.begin()
    second = writer.begin()
    second.write_event(b"z", routing_key="k")
    second.flush()
    connection = RedisConnection.from_url(redis_url)
    try:
        registry = CollectorRegistry()
        register_metrics(registry, connection, [scope])
        scraped = samples(generate_latest(registry).decode())
        labels = {"scope": scope, "stream": stream}
        name = "readergroup_stream_transactions"
        assert value(scraped, name, status="OPEN", **labels) == 2
        assert value(scraped, name, status="COMMITTING", **labels) == 0
        assert value(scraped, "readergroup_stream_oldest_transaction_seconds", **labels) >= 0
        first.abort()
        second.commit()
        scraped = samples(generate_latest(registry).decode())
        assert value(scraped, name, status="OPEN", **labels) == 0
        assert value(scraped, "readergroup_stream_oldest_transaction_seconds", **labels) == 0
    finally:
        connection.close()
