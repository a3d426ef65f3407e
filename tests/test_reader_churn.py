"""Readers with fresh ids joining and leaving (issue 34 item 9): the records of a reader gone
for good go with it, and the group's state log levels off (compaction), on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from readergroup import (
    ClientConfig,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin.group_manager import join_group
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.testing.memory_connection import MemoryConnection

COMPACT_EVERY = 40
CONFIG = ClientConfig(compact_every=COMPACT_EVERY)
FAST = {"heartbeat_interval": 0.2, "session_timeout": 2.0, "group_refresh_time": 0.05}


@pytest.fixture(params=["memory", "redis"])
def churned(request: pytest.FixtureRequest) -> Iterator[Connection]:
    made: Connection = (
        MemoryConnection(CONFIG)
        if request.param == "memory"
        else RedisConnection.from_url(request.getfixturevalue("redis_url"), CONFIG)
    )
    try:
        yield made
    finally:
        made.close()


def log_length(connection: Connection, sync_name: str) -> int:
    """Entries the group's state log holds now (the stored ones, not only the unread)."""
    if isinstance(connection, RedisConnection):
        client: redis.Redis = connection.client
        return int(client.xlen(f"rg:{{{sync_name}}}:log"))
    assert isinstance(connection, MemoryConnection)
    return len(connection.log_backend._logs[sync_name].entries)


def writer_rows(connection: Connection, sync_name: str) -> int:
    """Rows of the log's writer table (one per writer id: readers write under their ids)."""
    if isinstance(connection, RedisConnection):
        return int(connection.client.hlen(f"rg:{{{sync_name}}}:writers"))
    assert isinstance(connection, MemoryConnection)
    return len(connection.log_backend._logs[sync_name].writers)


def test_records_of_readers_gone_for_good_are_pruned_and_the_log_levels_off(
    churned: Connection, unique_name: str
) -> None:
    scope = f"c{unique_name[-10:]}"
    with StreamManager(churned) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s")
    rgm = ReaderGroupManager(scope, churned)
    rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST))
    group = rgm.get_reader_group("g")
    name = group.sync.name
    lengths = []
    for i in range(300):  # fresh ids joining and leaving
        member, _ = join_group(churned, scope, "g", f"r{i}")
        assert set(group.heartbeats.clients()) == {f"r{i}"}
        member.leave()
        lengths.append(log_length(churned, name))
    for i in range(10):  # removed by another: declared offline
        join_group(churned, scope, "g", f"gone{i}")
        assert group.reader_offline(f"gone{i}")
    factory = EventStreamClientFactory(scope, churned)
    for i in range(5):  # whole readers: the session's own leave on close
        factory.create_reader(f"whole{i}", "g", UTF8StringSerializer()).close()
    assert group.heartbeats.clients() == {}
    assert group.get_online_readers() == []
    assert max(lengths) <= 2 * COMPACT_EVERY + 2, max(lengths)
    group.refresh()
    assert group.sync.revision >= 10 * COMPACT_EVERY  # many more entries written than kept
    assert log_length(churned, name) <= 2 * COMPACT_EVERY + 2
    assert writer_rows(churned, name) <= 2 * COMPACT_EVERY + 2
    if isinstance(churned, RedisConnection):
        assert not churned.client.exists(group.heartbeats.key, group.heartbeats.clients_key)
