"""The read path on a real Redis, run unchanged on both drivers of the fetch core (ids
``[sync]`` and ``[async]``): the threaded ``Fetcher`` and the asyncio ``AsyncFetcher``. Hostile
records, gaps, truncation, sealed tails, bounded reads, seek/hold/serve, reading ahead: one
suite, so the two cannot drift apart."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from readergroup import (
    CorruptSegmentError,
    ReaderConfig,
    ScalingPolicy,
    SerializationError,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    TruncatedDataError,
)
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch
from tests.support import fetchers
from tests.support.fetchers import KINDS, Driven

connection = fetchers.redis_connection  # (the fixture, under this name here)

Rows = list[Any]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def drive(kind: str, connection: RedisConnection, redis_url: str) -> Iterator[Any]:
    made: list[Driven] = []

    def make(config: ReaderConfig | None = None) -> Driven:
        made.append(Driven(kind, connection, redis_url, config))
        return made[-1]

    yield make
    for driven in made:
        driven.close()


def make_stream(url: str, scope: str, segments: int = 1, **options: Any) -> None:
    with StreamManager.from_url(url) as sm:
        policy = ScalingPolicy.fixed(segments)
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=policy, **options))


def append(connection: RedisConnection, scope: str, segment: int, *payloads: str) -> None:
    """Events written as the library's writer writes them (``append_events.lua``)."""
    sequence = connection.client.incr(f"test-seq:{scope}:{segment}")
    batch = AppendBatch.of(
        scope, "s", segment, "w", int(sequence), [(None, p.encode(), 0) for p in payloads], 1 << 20
    )
    (reply,) = connection.segments.append([batch])
    assert reply.error is None, reply.error


def two_segments(url: str, scope: str, connection: RedisConnection, events: int) -> None:
    """A two-segment stream, ``events`` events in each (``"<segment>:<n>"``)."""
    make_stream(url, scope, 2)
    for number in (0, 1):
        append(connection, scope, number, *(f"{number}:{i}" for i in range(events)))


def rogue_xadd(client: Any, events_key: str, offset: int, fields: Any) -> None:
    client.xadd(events_key, fields, id=f"{offset + 1}-0")


def plain(payload: bytes | str) -> dict[str, Any]:
    return {"p": payload, "w": 0, "t": 0, "b": 0}


def split(rows: Rows) -> tuple[Rows, list[Exception]]:
    return (
        [r for r in rows if not isinstance(r, Exception)],
        [r for r in rows if isinstance(r, Exception)],
    )


# -- ordinary reads ------------------------------------------------------------------------------
def test_every_segment_is_read_in_order_and_positions_advance(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    two_segments(redis_url, scope, connection, 30)
    driven = drive()
    for number in (0, 1):
        driven.add(connection, scope, number)
    got = driven.results(lambda rows: len(rows) >= 60)
    for number in (0, 1):
        assert [v for v in got if v.startswith(f"{number}:")] == [
            f"{number}:{i}" for i in range(30)
        ]
        owned = driven.core.owned[(f"{scope}/s", number)]
        assert (owned.fetch, owned.returned) == (30, 30)
    driven.core.consume_returned()
    assert all(o.consumed == o.returned for o in driven.core.owned.values())


def test_hand_out_is_round_robin_and_a_full_buffer_is_not_fetched(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    two_segments(redis_url, scope, connection, 30)
    driven = drive(ReaderConfig(read_batch=10, max_buffered_events=10, prefetch_events=0))
    for number in (0, 1):
        driven.add(connection, scope, number)
    driven.fetch()
    assert [len(o.buffer) for o in driven.core.owned.values()] == [10, 10]
    driven.fetch()  # both buffers are full: nothing more is read
    assert [len(o.buffer) for o in driven.core.owned.values()] == [10, 10]
    first_two = driven.take(1) + driven.take(1)
    assert sorted(e.segment for e in first_two) == [0, 1]
    one = driven.core.take_one()
    assert one is not None and one.offset == 1


def test_news_in_a_log_waited_on_is_reported(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    log = f"{scope}:a-log"
    for _ in range(5):
        connection.client.xadd(log, {"x": "1"})
    newest: Any = connection.client.xrevrange(log, count=1)
    last = newest[0][0].decode()
    driven = drive()
    assert driven.fetch(0.05, {log: "0-0"}).woken == frozenset({log})
    assert driven.fetch(0.05, {log: last}).woken == frozenset()


def test_a_parked_read_outlives_the_call_and_its_reply_comes_to_the_next_one(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    log = f"{scope}:a-log"
    connection.client.xadd(log, {"x": "1"}, id="1-0")
    driven = drive()
    driven.add(connection, scope, 0)
    outcome = driven.fetch(0.06, {log: "1-0"}, hold=3.0)  # nothing yet: the XREAD stays
    assert outcome.watched and not outcome.woken
    parked = driven.core._parked
    assert parked is not None
    connection.client.xadd(log, {"x": "2"}, id="2-0")  # the parked XREAD is answered
    seen: set[str] = set()
    for _ in range(50):
        seen |= driven.fetch(0.06, {log: "1-0"}, hold=3.0).woken
        if seen:
            break
    assert seen == {log} and driven.core._parked is None  # its reply came to this call
    answered = parked.task.done() if driven.kind == "async" else not parked._open
    assert answered  # the very XREAD sent by the first call, not another
    append(connection, scope, 0, "a", "b")
    got = driven.results(lambda rows: len(rows) >= 2)
    assert got == ["a", "b"]


# -- hostile records -----------------------------------------------------------------------------
def test_a_gap_stops_its_segment_after_the_events_before_it(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    data_key = connection.keys.segment(scope, "s", 0).events
    for offset in (0, 1, 4):  # offsets 0, 1, then 4: out of sequence
        rogue_xadd(connection.client, data_key, offset, plain("x"))
    driven = drive()
    driven.add(connection, scope, 0)
    got = driven.results(lambda rows: any(isinstance(r, Exception) for r in rows))
    values, errors = split(got)
    assert values == ["x", "x"] and isinstance(errors[0], CorruptSegmentError)
    assert "after offset 1 has offset 4" in str(errors[0]) and data_key in str(errors[0])
    driven.fetch()  # a faulted segment is not read again
    assert driven.take(10) == [] and not driven.core.errors


def test_undecodable_and_oversized_events_are_typed_errors_naming_their_offsets(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    data_key = connection.keys.segment(scope, "s", 0).events
    rows = [b"ok", b"\xff\xfe", b"x" * 3000, b"later"]
    for offset, payload in enumerate(rows):
        rogue_xadd(connection.client, data_key, offset, plain(payload))
    driven = drive()
    owned = driven.add(connection, scope, 0)
    owned.max_event_size = 1000
    got = driven.results(lambda rows: rows[-1:] == ["later"])
    values, errors = split(got)
    assert values == ["ok", "later"] and len(errors) == 2
    assert all(isinstance(e, SerializationError) for e in errors)
    assert f"{scope}/s segment 0 offset 1" in str(errors[0])
    assert "over the stream's max_event_size of 1000" in str(errors[1])


def test_entries_of_other_shapes_are_decoded_by_name(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    data_key = connection.keys.segment(scope, "s", 0).events
    shapes = [
        {"b": 0, "t": 0, "w": 0, "p": "reordered"},
        {"p": "no-numbers"},
        {"k": "key", "p": "keyed", "w": 5, "t": 6, "b": 7, "extra": "ignored"},
        {"w": 0},  # no payload at all: empty
    ]
    for offset, fields in enumerate(shapes):
        rogue_xadd(connection.client, data_key, offset, fields)
    driven = drive()
    driven.add(connection, scope, 0)
    events: list[Any] = []
    for _ in range(50):
        driven.fetch()
        events += driven.take(10)
        if len(events) >= 4:
            break
    assert [e.event for e in events] == ["reordered", "no-numbers", "keyed", ""]
    assert events[2].routing_key == "key" and events[2].timestamp == 5


def test_a_segment_key_of_the_wrong_type_stops_only_that_segment_and_a_bad_log_is_named(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope, 2)
    append(connection, scope, 0, "a", "b")
    broken = connection.keys.segment(scope, "s", 1).events
    connection.client.set(broken, "not a stream")
    driven = drive()
    for number in (0, 1):
        driven.add(connection, scope, number)
    got = driven.results(lambda rows: len(rows) >= 3)
    values, errors = split(got)
    assert values == ["a", "b"] and isinstance(errors[0], CorruptSegmentError)
    assert broken in str(errors[0]) and "not a stream" in str(errors[0])
    bad_log = f"{scope}:bad-log"
    connection.client.set(bad_log, "x")
    assert driven.fetch(0.05, {bad_log: "0-0"}).bad_logs == frozenset({bad_log})


# -- truncation, sealed tails, bounded reads ---------------------------------------------------
def test_truncation_under_the_fetcher_is_reported_once_then_everything_that_exists_comes(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    append(connection, scope, 0, *(f"e{i}" for i in range(200)))
    driven = drive(ReaderConfig(read_batch=20, max_buffered_events=20, prefetch_events=0))
    driven.add(connection, scope, 0)
    got = driven.results(lambda rows: len(rows) >= 20)
    with StreamManager.from_url(redis_url) as sm:
        sm.truncate_stream(scope, "s", StreamCut(scope, "s", {0: 100}))
    got += driven.results(lambda rows: rows[-1:] == ["e199"])
    values, errors = split(got)
    assert len(errors) == 1 and isinstance(errors[0], TruncatedDataError)
    assert "below the head 100" in str(errors[0])
    before = [v for v in values if int(v[1:]) < 100]
    assert before == [f"e{i}" for i in range(len(before))]
    assert [v for v in values if int(v[1:]) >= 100] == [f"e{i}" for i in range(100, 200)]


def test_a_sealed_segment_is_read_to_its_tail_and_then_not_read_again(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    append(connection, scope, 0, *(f"e{i}" for i in range(25)))
    tail = connection.segments.seal(scope, "s", 0)
    driven = drive(ReaderConfig(read_batch=10, max_buffered_events=100))
    owned = driven.add(connection, scope, 0)
    owned.final_tail = tail
    got = driven.results(lambda rows: len(rows) >= 25)
    assert got == [f"e{i}" for i in range(25)] and owned.fetched_all
    connection.client.delete(owned.data_key)  # not read again: nothing could notice
    driven.fetch()
    assert driven.take(10) == [] and not driven.core.errors


def test_a_bounded_read_stops_at_its_end_offset(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    append(connection, scope, 0, *(f"e{i}" for i in range(30)))
    driven = drive(ReaderConfig(read_batch=10, max_buffered_events=100))
    owned = driven.add(connection, scope, 0, at=3)
    owned.final_tail, owned.bounded = 17, True
    got = driven.results(lambda rows: len(rows) >= 14)
    for _ in range(3):
        driven.fetch()
        got += [e.event for e in driven.take(100)]
    assert got == [f"e{i}" for i in range(3, 17)] and owned.fetched_all


# -- seek, hold, serve ---------------------------------------------------------------------------
def test_hold_serve_and_seek(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    two_segments(redis_url, scope, connection, 10)
    driven = drive()
    zero = driven.add(connection, scope, 0)
    driven.add(connection, scope, 1)
    driven.core.hold(zero.key)
    got = driven.results(lambda rows: len(rows) >= 10)
    assert got == [f"1:{i}" for i in range(10)] and len(zero.buffer) == 10  # read, held
    driven.core.seek(zero.key, 7)
    assert (zero.fetch, zero.returned, len(zero.buffer)) == (7, 7, 0)
    driven.core.serve(zero.key)
    assert driven.results(lambda rows: len(rows) >= 3) == ["0:7", "0:8", "0:9"]


# -- reading ahead -------------------------------------------------------------------------------
def test_reads_ahead_fill_the_buffer_within_prefetch_events_in_order(
    drive: Any, redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope)
    append(connection, scope, 0, *(f"e{i}" for i in range(100)))
    config = ReaderConfig(read_batch=10, max_buffered_events=100, prefetch_events=25)
    driven = drive(config)
    owned = driven.add(connection, scope, 0)
    driven.fetch()  # 10: a full batch, so the next read goes out at once
    assert len(owned.buffer) == 10
    for _ in range(6):
        driven.collect(0.2)
        assert len(owned.buffer) <= 25
    assert len(owned.buffer) == 25
    assert [e.offset for e in driven.take(20)] == list(range(20))
    rest = driven.results(lambda rows: len(rows) >= 80)
    assert rest == [f"e{i}" for i in range(20, 100)]
    assert owned.returned == 100 and owned.fetch == 100


def test_cancelling_the_redis_read_of_a_dropped_read_ahead_leaves_no_connection_in_use(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    driven = Driven("async", connection, redis_url, ReaderConfig(read_batch=10))
    try:
        make_stream(redis_url, scope)
        append(connection, scope, 0, *(f"e{i}" for i in range(100)))
        owned = driven.add(connection, scope, 0)
        driven.fetch()
        assert driven.core._ahead  # a read ahead outstanding
        driven.core.seek(owned.key, 0)  # drops it: its task is cancelled
        driven.run(driven.core.aclose)  # type: ignore[attr-defined]
        pool = driven.client.connection_pool
        assert not pool._in_use_connections
        assert driven.results(lambda rows: len(rows) >= 100) == [f"e{i}" for i in range(100)]
    finally:
        driven.close()
    assert redis.Redis.from_url(redis_url).ping()


# -- outages -------------------------------------------------------------------------------------
def test_reads_return_nothing_in_an_outage_then_go_on_where_they_stopped(
    kind: str, private_redis: Any
) -> None:
    """Redis goes away under the fetcher: its reads return nothing (no exception; the outage
    is recorded), and once Redis is back every event comes, once, in order."""
    url = private_redis.url
    scope = "outage"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
    make_stream(url, scope)
    connection = RedisConnection.from_url(url)
    driven = Driven(kind, connection, url, ReaderConfig(read_batch=10, prefetch_events=0))
    try:
        append(connection, scope, 0, *(f"e{i}" for i in range(20)))
        driven.add(connection, scope, 0)
        got = driven.results(lambda rows: len(rows) >= 10)
        assert len(got) == 10  # (one batch: the rest is read after the outage)
        private_redis.stop()
        for _ in range(3):
            outcome = driven.fetch(0.05)
            got += [e.event for e in driven.take(100)]
        assert driven.core._outage.error is not None and not outcome.woken
        private_redis.start()
        got += driven.results(lambda rows: len(rows) >= 20 - len(got))
        assert got == [f"e{i}" for i in range(20)] and driven.core._outage.error is None
    finally:
        driven.close()
        connection.close()
