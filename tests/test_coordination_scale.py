"""Coordination at scale (issue 15), on a real Redis: keyed preconditions (readers changing
different segments do not conflict), commits that wake nobody, one read per wake-up."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from readergroup import EventStreamClientFactory, UTF8StringSerializer
from readergroup.admin.group_manager import join_group
from readergroup.core.balance import segments_to_acquire
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import (
    AcquireSegments,
    AddReader,
    CommitPositions,
    ReleaseSegments,
    RemoveReader,
    check_invariants,
    new_group,
)
from readergroup.storage.connection import RedisConnection
from tests.support.waiting import wait_until
from tests.test_protocol_races import make_group, make_stream, write_keys


@pytest.fixture
def connection(redis_url: str) -> Iterator[RedisConnection]:
    conn = RedisConnection.from_url(redis_url)
    yield conn
    conn.close()


def test_changes_to_different_readers_and_segments_do_not_conflict(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope, 8)
    make_group(redis_url, scope)
    a, _ = join_group(connection, scope, "g", "a")
    a.rebalance({})
    b, _ = join_group(connection, scope, "g", "b")
    assert len(a.refresh().owned_by("a")) == 8
    released = a.rebalance({}, fetched_at=a.sync.revision)[1]  # a's share is 4 now
    assert len(released) == 4 and a.sync.stats.conflicts == 0
    kept = a.sync.state.owned_by("a")
    b.refresh()
    stale = b.sync.revision
    # while b decides on the state it just read, a commits its segments and c joins: neither
    # concerns the reader or the segments b's acquisition does
    a.commit({s: (assignment.token, 1) for s, assignment in kept.items()})
    join_group(connection, scope, "g", "c")
    acquired, _ = b.rebalance({}, fetched_at=stale)
    assert sorted(acquired) == sorted(released)
    assert b.sync.stats.conflicts == 0 and b.sync.stats.disjoint_appends == 1
    state = b.sync.state  # caught up past the entries it landed after
    assert b.sync.revision == stale + 3 and "c" in state.readers
    assert all(state.assigned[s].position == 1 and state.assigned[s].reader == "a" for s in kept)
    assert all(state.assigned[s].reader == "b" for s in released)


def test_commits_wake_no_follower_and_membership_changes_do(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope, 4)
    make_group(redis_url, scope)
    a, _ = join_group(connection, scope, "g", "a")
    a.rebalance({})
    seen = a.sync.revision
    for position in range(1, 6):
        a.commit({s: (x.token, position) for s, x in a.sync.state.owned_by("a").items()})
    assert a.sync.revision == seen + 5
    backend = connection.log_backend
    assert backend.wait(a.sync.name, seen, 0.05)  # the log moved...
    assert not backend.wait(a.sync.name, seen, 0.05, wakes_only=True, follower="a")  # ...nobody
    join_group(connection, scope, "g", "b")  # a must give b half: the join names a
    assert backend.wait(a.sync.name, seen, 0.05, wakes_only=True, follower="a")


def test_commits_do_not_wake_a_reader_with_nothing_to_do(redis_url: str, scope: str) -> None:
    make_stream(redis_url, scope, 1)
    config = {"heartbeat_interval": 5.0, "session_timeout": 30.0, "commit_mode": "manual"}
    make_group(redis_url, scope, **config)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        write_keys(factory, ["k"], 30, "e")
        busy = factory.create_reader("busy", "g", UTF8StringSerializer())
        assert busy.read_next_event(timeout=10).event is not None  # owns the segment
        idle = factory.create_reader("idle", "g", UTF8StringSerializer())
        stop = threading.Event()

        def read_idle() -> None:
            while not stop.is_set():
                idle.read_next_event(timeout=0.2)

        thread = threading.Thread(target=read_idle, daemon=True)
        thread.start()
        try:
            wait_until(lambda: idle._session._seen_revision >= 0, 10)  # first look done
            busy.read_next_event(timeout=0.2)  # settle both readers' first looks
            idle_sync = idle._member.sync
            reads, revision = idle_sync.stats.reads, busy._member.sync.revision
            for _ in range(20):
                event = busy.read_next_event(timeout=5)
                assert event.event is not None
                busy.commit()
            assert busy._member.sync.revision >= revision + 20  # 20 commits landed
            # before: every commit woke the idle reader (3 reads each), and so did every
            # 0.5 s refresh; now at most its heartbeat's read and one catching-up read
            assert idle_sync.stats.reads - reads <= 3
        finally:
            stop.set()
            thread.join(5)
            idle.close()
            busy.close()


def test_the_owner_index_is_carried_through_moves_not_rebuilt() -> None:
    config = ReaderGroupConfig(streams=["x/s"])
    state = new_group("x", "g", config, {("x/s", i): 0 for i in range(64)}, 0)
    for reader in ("a", "b"):
        state = AddReader(reader, 0).apply_to(state)
    generation = {r: state.readers[r].generation for r in ("a", "b")}
    state = AcquireSegments(
        "a", generation["a"], tuple(segments_to_acquire(state, "a")), 0
    ).apply_to(state)
    assert state.counts() == {"a": 32, "b": 0}  # builds the index once
    steps = [
        lambda s: AcquireSegments("b", generation["b"], tuple(segments_to_acquire(s, "b")), 0),
        lambda s: CommitPositions(
            "a", generation["a"], tuple((k, a.token, 7) for k, a in s.owned_by("a").items())
        ),
        lambda s: ReleaseSegments(
            "b",
            generation["b"],
            tuple((k, a.token, 1) for k, a in list(s.owned_by("b").items())[:5]),
        ),
        lambda s: RemoveReader("a", generation["a"]),
    ]
    for step in steps:
        state = step(state).apply_to(state)
        assert state._owners is not None, "the index was dropped: the next look rebuilds it"
        check_invariants(state)  # the carried index agrees with the assignments
    assert state.counts() == {"b": 27}
    assert all(a.reader == "b" for a in state.owned_by("b").values())
