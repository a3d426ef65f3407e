"""The reader's two parts on their own, against a real Redis: the fetcher (buffers, reads,
contiguity, hand-out) and the group session (membership, rebalance, commits, completion)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import redis

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
from statesync import ManualClock
from statesync.system_clock import SYSTEM_CLOCK
from tests.support import fetchers
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
    url_factory_fixture,  # noqa: F401 (a fixture)
)
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.05}


connection = fetchers.redis_connection  # (the fixture, under this name here)


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


def test_a_reader_with_nothing_to_do_is_not_woken_by_others_moves(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """Moves wake only the readers with a move to make then (issue 15): a reader at its share
    skips the wake-ups of others' releases and acquisitions."""
    make_stream(redis_url, scope, segments=8)
    config = ReaderGroupConfig(streams=[f"{scope}/s"], session_timeout=10.0)
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", config)
    a, a_fetcher = session_of(connection, scope, "a")
    b, b_fetcher = session_of(connection, scope, "b")

    def poll(session: GroupSession[str], fetcher: Fetcher[str]) -> bool:
        """One turn of a read call: wait briefly for news, then maintain; whether woken."""
        session.absorb(fetcher.fetch(0.02, session.wake_logs()))
        woken = session.group_dirty
        session.maintain()
        return woken

    def four_each() -> bool:
        poll(a, a_fetcher), poll(b, b_fetcher)
        return len(a_fetcher.owned) == len(b_fetcher.owned) == 4

    wait_until(four_each, 20, "four segments each")
    while poll(a, a_fetcher) or poll(b, b_fetcher):
        pass  # every wake-up so far acted on
    c, c_fetcher = session_of(connection, scope, "c")  # 8 / 3: a and b above ceil 3
    assert poll(a, a_fetcher) and len(a_fetcher.owned) == 3  # woken by the join: releases one
    assert poll(b, b_fetcher) and len(b_fetcher.owned) == 3
    poll(c, c_fetcher)
    assert len(c_fetcher.owned) == 2  # balanced: 3, 3, 2
    # b's release and c's acquisition concern neither a nor b (at their share of 3): their
    # wake-ups are looked at and skipped (a's heartbeat thread may still read the log, once a
    # session, so the reads themselves are not counted here)
    assert not poll(a, a_fetcher) and not poll(b, b_fetcher)
    assert len(a_fetcher.owned) == len(b_fetcher.owned) == 3
    for session in (a, b, c):
        session.close()


# -- reading ahead -------------------------------------------------------------------------------
def test_a_read_ahead_is_sent_while_a_segment_is_behind_and_fills_the_buffer(
    redis_url: str, scope: str, connection: RedisConnection, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope, segments=1)
    write(factory, 25)
    fetcher = fetcher_of(connection, ReaderConfig(read_batch=10, max_buffered_events=100))
    fetcher.add(segment(connection, scope, 0))
    fetcher.fetch(0.05, {})  # 10 events: a full batch, so the next 10 are requested at once
    owned = fetcher.owned[(f"{scope}/s", 0)]
    assert len(owned.buffer) == 10
    wait_until(lambda: fetcher.collect(0.05), 10, "the read ahead's reply")
    assert len(owned.buffer) == 20
    wait_until(lambda: fetcher.collect(0.05), 10, "the next read ahead's reply")
    assert len(owned.buffer) == 25 and not owned.behind  # a short batch: caught up
    assert not fetcher.collect(0.05)  # nothing outstanding any more
    assert [e.offset for e in fetcher.take(100)] == list(range(25))


def test_reading_ahead_holds_at_most_prefetch_events(
    redis_url: str, scope: str, connection: RedisConnection, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope, segments=1)
    write(factory, 100)
    config = ReaderConfig(read_batch=10, max_buffered_events=100, prefetch_events=25)
    fetcher = fetcher_of(connection, config)
    fetcher.add(segment(connection, scope, 0))
    fetcher.fetch(0.05, {})
    owned = fetcher.owned[(f"{scope}/s", 0)]
    for _ in range(5):
        fetcher.collect(0.2)
        assert len(owned.buffer) <= 25
    assert len(owned.buffer) == 25
    fetcher.take(20)  # room again: reading ahead resumes on the next fetch or collect
    fetcher.fetch(0.05, {})
    fetcher.collect(0.2)
    assert [e.offset for e in fetcher.take(100)] == list(range(20, 20 + 25))


def test_several_reads_ahead_are_outstanding_while_replies_come_back_full(
    redis_url: str, scope: str, connection: RedisConnection, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope, segments=1)
    write(factory, 120)
    config = ReaderConfig(read_batch=10, max_buffered_events=1000, prefetch_events=45)
    fetcher = fetcher_of(connection, config)
    fetcher.add(segment(connection, scope, 0))
    fetcher.fetch(0.05, {})  # 10 buffered, the read of 10..19 sent ahead
    owned = fetcher.owned[(f"{scope}/s", 0)]
    wait_until(lambda: fetcher.collect(0.05), 10, "the read ahead's reply")
    # 20 buffered; 20..29 and 30..39 asked for at once: 40 of prefetch_events=45 held
    assert len(owned.buffer) == 20
    assert [dict(a.targets)[owned.data_key][1] for a in fetcher._ahead] == [20, 30]
    got = [e.offset for e in fetcher.take(15)]
    for _ in range(200):
        if len(got) >= 120:
            break
        fetcher.fetch(0.05, {})
        got += [e.offset for e in fetcher.take(7)]
        held = len(owned.buffer) + sum(a.count for a in fetcher._ahead)
        assert held <= 45
    assert got == list(range(120))  # in order, each once
    wait_until(lambda: not fetcher.collect(0.05) and not fetcher._ahead, 10, "caught up")


def test_news_in_another_segment_is_read_while_one_segment_is_read_ahead(
    redis_url: str, scope: str, connection: RedisConnection, factory: EventStreamClientFactory
) -> None:
    """Reads ahead of a segment with a backlog also look at the reader's other segments: their
    new events do not wait until the backlog is read (no on-demand read while ahead)."""
    from readergroup.core.routing import key_position

    make_stream(redis_url, scope, segments=2)
    keys = [f"k{i}" for i in range(200)]
    first = [k for k in keys if key_position(k) < 0.5]
    second = [k for k in keys if key_position(k) >= 0.5]
    with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
        for i in range(300):
            writer.write_event(f"a{i}", routing_key=first[i % len(first)])
    fetcher = fetcher_of(connection, ReaderConfig(read_batch=10, max_buffered_events=1000))
    fetcher.add(segment(connection, scope, 0))
    fetcher.add(segment(connection, scope, 1))
    fetcher.fetch(0.05, {})  # segment 0: a full batch, read ahead from now on; segment 1: none
    with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
        for i in range(3):
            writer.write_event(f"b{i}", routing_key=second[i])
    got: list[str] = []
    for _ in range(40):
        fetcher.fetch(0.05, {})
        got += [e.event or "" for e in fetcher.take(5)]
        if "b2" in got:
            break
    assert [e for e in got if e.startswith("b")] == ["b0", "b1", "b2"]
    assert got.index("b0") < 60  # within a few reads, long before the backlog is read


def test_a_read_ahead_for_a_segment_given_up_meanwhile_is_dropped(
    redis_url: str, scope: str, connection: RedisConnection, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope, segments=1)
    write(factory, 30)
    fetcher = fetcher_of(connection, ReaderConfig(read_batch=10, max_buffered_events=100))
    fetcher.add(segment(connection, scope, 0))
    fetcher.fetch(0.05, {})  # sends a read ahead from offset 10
    fetcher.clear()  # released (or fenced), then acquired again at the committed offset 3
    fetcher.add(segment(connection, scope, 0, at=3))
    wait_until(lambda: not fetcher.collect(0.05) and not fetcher._ahead, 10, "collected")
    assert not fetcher.owned[(f"{scope}/s", 0)].buffer  # the stale reply went nowhere
    fetcher.fetch(0.05, {})
    assert [e.offset for e in fetcher.take(100)][:3] == [3, 4, 5]


def test_prefetch_bounds_are_validated() -> None:
    from readergroup import InvalidConfigError

    assert ReaderConfig(prefetch_events=0, prefetch_bytes=0).prefetch_events == 0
    for bad in ({"prefetch_events": -1}, {"prefetch_bytes": -5}, {"prefetch_events": True}):
        with pytest.raises(InvalidConfigError, match="prefetch"):
            ReaderConfig(**bad)


@flavoured_on_redis("sync", "async")
# -- the fast path ------------------------------------------------------------------------------
def test_buffered_events_go_out_without_a_round_trip_while_nothing_is_due(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope, segments=1)
    write(factory, 100)
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))
    clock = ManualClock(50.0)  # frozen: no maintenance falls due
    reader = factory.create_reader("r", "g", UTF8StringSerializer(), clock=clock)
    first = reader.read_next_event(timeout=2)  # joins the segments, fetches all 100
    assert first.event == "e0"
    probe = redis.Redis.from_url(redis_url)

    def reads() -> int:
        stats = probe.info("commandstats")
        return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("xread", "xrange"))

    before = reads()
    rest = [reader.read_next_event(timeout=2).event for _ in range(49)]
    rest += [e.event for e in reader.read_batch(50, timeout=2)]
    assert reads() == before  # served from the buffer: not a single read of Redis
    assert rest == [f"e{i}" for i in range(1, 100)]
    clock.advance(1.0)  # a group refresh falls due: the next call maintains first
    assert reader.read_next_event(timeout=0).event is None  # (timeouts run on the clock too)
    assert reads() > before
    reader.close()
    probe.close()


def test_the_fast_path_skips_segments_with_nothing_buffered(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope, segments=2)
    data_key = connection.keys.segment(scope, "s", 1).events
    for n in range(6):  # only segment 1 has events
        connection.client.xadd(
            data_key, {"p": f"e{n}", "w": "0", "t": "0", "b": "0"}, id=f"{n + 1}-0"
        )
    fetcher = fetcher_of(connection)
    for number in (0, 1):
        fetcher.add(segment(connection, scope, number))
    fetcher.fetch(0.05, {})
    taken = [fetcher.take_one() for _ in range(6)]
    assert [e.event if e is not None else None for e in taken] == [f"e{n}" for n in range(6)]
    assert fetcher.take_one() is None  # nothing buffered anywhere: the general path fetches
    assert fetcher.owned[(f"{scope}/s", 1)].returned == 6
