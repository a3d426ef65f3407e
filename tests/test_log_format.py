"""Log format negotiation in a group whose readers run different versions (see
:mod:`readergroup.core.log_format`); the rolling upgrade across processes of the previous
version is in ``tests/test_rolling_upgrade.py``."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace

import msgpack
import pytest
from click.testing import CliRunner

from readergroup import (
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.admin.group_manager import join_group
from readergroup.cli import main
from readergroup.core.errors import RedisUnavailableError
from readergroup.core.group_state import GroupState, ReaderRecord, new_group
from readergroup.core.log_format import NEWEST_FORMAT, UNANNOUNCED_FORMAT
from readergroup.core.names import catalog_sync_name, group_sync_name, stream_sync_name
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.storage.format_negotiation import NegotiatedFormat
from readergroup.testing.memory_heartbeats import MemoryHeartbeatStore
from tests.support.connections import new_scope


class CountingStore(MemoryHeartbeatStore):
    """Counts reads of the announcements; ``down`` makes them fail."""

    def __init__(self) -> None:
        super().__init__(lambda: 0)
        self.reads = 0
        self.down = False

    def announcements(self) -> dict[str, tuple[int, int, int]]:
        self.reads += 1
        if self.down:
            raise RedisUnavailableError("announcements: connection refused")
        return super().announcements()


def record(reader_id: str, generation: int, joined_ms: int = 0) -> ReaderRecord:
    return ReaderRecord(reader_id, generation, joined_ms)


def group_with(*records: ReaderRecord) -> GroupState:
    """A group state whose members are ``records``."""
    state = new_group("s", "g", ReaderGroupConfig(streams=["s/t"]), {}, 0)
    return replace(state, readers={r.reader_id: r for r in records})


def test_the_format_is_the_lowest_any_member_reads() -> None:
    store, now = CountingStore(), [0.0]
    negotiate = NegotiatedFormat(store, clock=lambda: now[0])
    assert negotiate(group_with()) == UNANNOUNCED_FORMAT and store.reads == 0  # no members
    store.announce(record("a", 1), NEWEST_FORMAT)
    assert negotiate(group_with(record("a", 1))) == NEWEST_FORMAT
    assert negotiate(group_with(record("a", 1))) == NEWEST_FORMAT
    assert store.reads == 1  # every member known to read the newest: no read
    both = group_with(record("a", 1), record("b", 2))  # b announced nothing (an older version)
    assert negotiate(both) == UNANNOUNCED_FORMAT and store.reads == 2
    store.announce(record("b", 2), NEWEST_FORMAT)
    assert negotiate(both) == UNANNOUNCED_FORMAT and store.reads == 2  # read again after 1 s
    now[0] += 1.0
    assert negotiate(both) == NEWEST_FORMAT and store.reads == 3
    assert negotiate(group_with(record("a", 1), record("b", 3))) == UNANNOUNCED_FORMAT  # rejoined
    # a member of a deleted group of the same name announced under the same generation
    assert negotiate(group_with(record("a", 1, joined_ms=5))) == UNANNOUNCED_FORMAT


def test_unreadable_announcements_keep_the_older_format(caplog: pytest.LogCaptureFixture) -> None:
    store = CountingStore()
    store.announce(record("a", 1), NEWEST_FORMAT)
    store.down = True
    with caplog.at_level(logging.WARNING):
        assert NegotiatedFormat(store)(group_with(record("a", 1))) == UNANNOUNCED_FORMAT
    assert "could not read the readers' log formats" in caplog.text


@pytest.fixture
def members(connection: Connection) -> Iterator[tuple[Connection, str]]:
    scope = new_scope(connection)
    StreamManager(connection).create_stream(
        scope, "t", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
    )
    ReaderGroupManager(scope, connection).create_reader_group(
        "g", ReaderGroupConfig(streams=[f"{scope}/t"])
    )
    yield connection, scope


def frame_version(payload: bytes) -> int:
    """The format version an entry is labelled with."""
    version: int = msgpack.unpackb(payload, raw=False)["v"]
    return version


def formats_since(connection: Connection, scope: str, revision: int) -> list[int]:
    page = connection.log_backend.read(group_sync_name(scope, "g"), revision, 1000)
    return [frame_version(raw.payload) for raw in page.entries]


def test_entries_stay_readable_while_an_older_reader_is_a_member(
    members: tuple[Connection, str],
) -> None:
    """A member that announced nothing (a reader of the previous version) holds every entry
    at a format it reads, whoever writes it; once it has left, the newest format is back."""
    connection, scope = members
    new, _ = join_group(connection, scope, "g", "new")
    old, _ = join_group(connection, scope, "g", "old")
    old.heartbeats.withdraw("old", old.generation)  # what a previous-version member leaves
    new.refresh()
    mark = new.sync.revision
    new.rebalance({})
    old.rebalance({})
    new.commit({s: (a.token, a.position + 1) for s, a in new.refresh().owned_by("new").items()})
    assert len(new.state.owned_by("new")) == 2
    assert formats_since(connection, scope, mark) and set(
        formats_since(connection, scope, mark)
    ) <= {1, 2}
    old.leave()
    new.refresh()
    mark = new.sync.revision
    new.rebalance({})
    assert len(new.state.owned_by("new")) == 4
    assert formats_since(connection, scope, mark) == [NEWEST_FORMAT]
    assert [
        m.log_format for m in ReaderGroupManager(scope, connection).get_reader_group("g").members()
    ] == [NEWEST_FORMAT]


def fresh_read_formats(connection: Connection, scope: str) -> list[int]:
    """The formats of the entries a reader joining now reads (after the newest snapshot)."""
    page = connection.log_backend.read(group_sync_name(scope, "g"), -1, 1000)
    return [frame_version(raw.payload) for raw in page.entries]


def test_a_group_left_empty_is_readable_to_the_previous_version_again(
    members: tuple[Connection, str],
) -> None:
    """Entries of format 3 stay behind the newest snapshot once the group is empty: the last
    reader to leave compacts the log; for readers that crashed, compact_log() does."""
    connection, scope = members
    first, _ = join_group(connection, scope, "g", "first")
    first.rebalance({})
    assert NEWEST_FORMAT in fresh_read_formats(connection, scope)
    first.leave()
    assert fresh_read_formats(connection, scope) == []
    crashed, _ = join_group(connection, scope, "g", "crashed")
    crashed.rebalance({})
    group = ReaderGroupManager(scope, connection).get_reader_group("g")
    assert group.reader_offline("crashed")
    assert NEWEST_FORMAT in fresh_read_formats(connection, scope)
    group.compact_log()
    assert fresh_read_formats(connection, scope) == []


def test_group_compact_on_the_command_line(redis_url: str, scope: str) -> None:
    with closing(RedisConnection.from_url(redis_url)) as connection:
        StreamManager(connection).create_stream(scope, "t")
        ReaderGroupManager(scope, connection).create_reader_group(
            "g", ReaderGroupConfig(streams=[f"{scope}/t"])
        )
        member, _ = join_group(connection, scope, "g", "r")
        member.rebalance({})
        done = CliRunner().invoke(
            main, ["group", "compact", f"{scope}/g", "--json", "--redis-url", redis_url]
        )
        assert done.exit_code == 0, done.output
        assert json.loads(done.output)["online_readers"] == ["r"]  # they write on
        assert fresh_read_formats(connection, scope) == []


def test_logs_nobody_negotiates_are_written_as_every_version_reads(
    members: tuple[Connection, str],
) -> None:
    """Stream metadata and catalogs are read by every process of every version (writers
    too) and announce nothing: their entries stay in format 2, which the previous version reads."""
    connection, scope = members
    StreamManager(connection).scale_stream(scope, "t", [0], [(0.0, 0.125), (0.125, 0.25)])
    for name in (stream_sync_name(scope, "t"), catalog_sync_name(scope)):
        page = connection.log_backend.read(name, 0, 1000)
        assert page.entries and {frame_version(raw.payload) for raw in page.entries} <= {1, 2}
