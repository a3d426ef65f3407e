"""The reader's two parts on their own, against a real Redis: the fetcher (buffers, reads,
contiguity, hand-out) and the group session (membership, rebalance, commits, completion)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup import (
    CorruptSegmentError,
    EventStreamClientFactory,
    ReaderConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin.group_manager import join_group
from readergroup.client.fetcher import Fetcher, Outage, OwnedSegment
from readergroup.client.group_session import GroupSession
from readergroup.core.errors import ReaderGroupError, SerializationError
from readergroup.storage.connection import RedisConnection
from statesync.system_clock import SYSTEM_CLOCK
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.05}


@pytest.fixture
def connection(redis_url: str) -> Iterator[RedisConnection]:
    conn = RedisConnection.from_url(redis_url)
    try:
        yield conn
    finally:
        conn.close()


def make_stream(redis_url: str, scope: str, segments: int = 2) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(
            scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )


def write(factory: EventStreamClientFactory, count: int) -> None:
    with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
        for i in range(count):
            writer.write_event(f"e{i}", routing_key=f"k{i}")


def fetcher_of(connection: RedisConnection, config: ReaderConfig | None = None) -> Fetcher[str]:
    outage = Outage("t", 10.0)
    return Fetcher(
        connection, UTF8StringSerializer(), config or ReaderConfig(), outage, SYSTEM_CLOCK
    )


def segment(connection: RedisConnection, scope: str, number: int, at: int = 0) -> OwnedSegment:
    data_key = connection.keys.segment(scope, "s", number).events
    return OwnedSegment.at((f"{scope}/s", number), scope, "s", data_key, 1, at)


def fetch_all(fetcher: Fetcher[str], want: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(20):
        fetcher.fetch(0.05, {})
        got += fetcher.take(1000)
        if len(got) >= want:
            break
    return got


# -- pure bookkeeping ----------------------------------------------------------------------------
def test_an_owned_segment_holds_the_first_error_and_knows_when_it_is_read_to_its_end() -> None:
    owned = OwnedSegment.at(("sc/s", 0), "sc", "s", "k", 3, 7)
    assert (owned.committed, owned.fetch, owned.returned, owned.consumed) == (7, 7, 7, 7)
    assert not owned.fetched_all
    owned.final_tail = 7
    assert owned.fetched_all
    first, second = ReaderGroupError("first"), ReaderGroupError("second")
    owned.hold(first, 9)
    owned.hold(second, 8, fault=True)
    assert (owned.pending, owned.pending_at, owned.faulted) == (first, 9, True)


# -- the fetcher ---------------------------------------------------------------------------------
def test_the_fetcher_reads_every_segment_in_order_and_advances_positions(
    redis_url: str, scope: str, connection: RedisConnection, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope)
    write(factory, 50)
    fetcher = fetcher_of(connection)
    for number in (0, 1):
        fetcher.add(segment(connection, scope, number))
    got = fetch_all(fetcher, 50)
    assert sorted(e.event for e in got) == sorted(f"e{i}" for i in range(50))
    for number in (0, 1):
        offsets = [e.offset for e in got if e.segment == number]
        assert offsets == list(range(len(offsets)))
        owned = fetcher.owned[(f"{scope}/s", number)]
        assert owned.returned == owned.fetch == len(offsets) and owned.consumed == 0
    fetcher.consume_returned()
    assert all(o.consumed == o.returned for o in fetcher.owned.values())


def test_the_fetcher_takes_round_robin_and_stops_fetching_a_full_buffer(
    redis_url: str, scope: str, connection: RedisConnection, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope)
    write(factory, 200)
    fetcher = fetcher_of(connection, ReaderConfig(read_batch=10, max_buffered_events=10))
    for number in (0, 1):
        fetcher.add(segment(connection, scope, number))
    fetcher.fetch(0.05, {})
    assert [len(o.buffer) for o in fetcher.owned.values()] == [10, 10]
    fetcher.fetch(0.05, {})  # both buffers are full: nothing more is read
    assert [len(o.buffer) for o in fetcher.owned.values()] == [10, 10]
    first_two = fetcher.take(1) + fetcher.take(1)
    assert {e.segment for e in first_two} == {0, 1}


def test_the_fetcher_reports_news_in_the_logs_it_waits_on(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    log = f"{scope}:test-log"
    connection.client.xadd(log, {"x": "1"}, id="5-0")
    fetcher = fetcher_of(connection)
    outcome = fetcher.fetch(0.05, {log: "4-0"})
    assert outcome.woken == {log} and not outcome.bad_logs
    assert fetcher.fetch(0.05, {log: "5-0"}).woken == frozenset()


def test_the_fetcher_delivers_up_to_a_gap_then_raises_corrupt_segment(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope, segments=1)
    data_key = connection.keys.segment(scope, "s", 0).events
    for entry_id in ("1-0", "2-0", "5-0"):  # offsets 0, 1, then 4: out of sequence
        connection.client.xadd(data_key, {"p": "x", "w": "0", "t": "0", "b": "0"}, id=entry_id)
    fetcher = fetcher_of(connection)
    fetcher.add(segment(connection, scope, 0))
    fetcher.fetch(0.05, {})
    assert [e.offset for e in fetcher.take(10)] == [0, 1]
    with pytest.raises(CorruptSegmentError, match="offset 4"):
        raise fetcher.errors.popleft()  # raised on the read call after the events before it
    fetcher.fetch(0.05, {})  # a faulted segment is not read again
    assert fetcher.take(10) == []


def test_a_serializer_error_comes_after_the_events_before_it(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope, segments=1)
    data_key = connection.keys.segment(scope, "s", 0).events
    for n, payload in enumerate((b"ok", b"\xff\xfe", b"later")):
        connection.client.xadd(
            data_key, {"p": payload, "w": "0", "t": "0", "b": "0"}, id=f"{n + 1}-0"
        )
    fetcher = fetcher_of(connection)
    fetcher.add(segment(connection, scope, 0))
    fetcher.fetch(0.05, {})
    assert [e.event for e in fetcher.take(10)] == ["ok"]
    with pytest.raises(SerializationError, match="offset 1"):
        raise fetcher.errors.popleft()
    assert [e.event for e in fetcher.take(10)] == ["later"]


# -- the group session ---------------------------------------------------------------------------
def session_of(
    connection: RedisConnection, scope: str, reader_id: str
) -> tuple[GroupSession[str], Fetcher[str]]:
    member, config = join_group(connection, scope, "g", reader_id)
    fetcher = fetcher_of(connection)
    outage = Outage(reader_id, config.session_timeout)
    session = GroupSession(
        connection, member, config, fetcher, outage, clock=SYSTEM_CLOCK, rng=random.Random(1)
    )
    return session, fetcher


def test_sessions_share_the_segments_commit_and_give_them_back_on_close(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope, segments=4)
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST))
    a, a_fetcher = session_of(connection, scope, "a")
    a.maintain()
    assert len(a_fetcher.owned) == 4
    b, b_fetcher = session_of(connection, scope, "b")

    def balanced() -> bool:
        a.maintain()
        b.maintain()
        return len(a_fetcher.owned) == len(b_fetcher.owned) == 2

    wait_until(balanced, 20, "two segments each")
    key = next(iter(a_fetcher.owned))
    a.commit({key: 0})
    a.close()
    wait_until(lambda: (b.maintain(), len(b_fetcher.owned) == 4)[1], 20, "b takes all four")
    assert a_fetcher.owned == {}
    with pytest.raises(ReaderGroupError, match="closed"):
        a.check_usable()
    b.close()
