"""Coordination at scale (issue 15), on a real Redis: keyed preconditions (readers changing
different segments do not conflict), commits that wake nobody, one read per wake-up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from readergroup.admin.group_manager import join_group
from readergroup.storage.redis_io import RedisConnection
from tests.test_protocol_races import make_group, make_stream


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
    assert not backend.wait(a.sync.name, seen, 0.05, wakes_only=True)  # ...waking nobody
    join_group(connection, scope, "g", "b")
    assert backend.wait(a.sync.name, seen, 0.05, wakes_only=True)
