"""Per-event headers (issue 30 item 7): string keys, bytes values, bounded size, through the
writer (script path, native bulk path, put-back after a lossy failover), the reader, the batch
client, and readable by the previous version's readers (as events without headers).

How headers are stored: one extra stream-entry field ``h`` (msgpack map of str -> bin), only
when the event has headers, between ``k`` and ``p``. Readers of 26dd67a recognise only the
layouts ``p w t b`` (8 fields) and ``k p w t b`` (10 fields, ``k`` first) on their fast paths
and decode everything else by field name, ignoring names they do not know
(``git show 26dd67a:readergroup/storage/segment_records.py``: ``is_canonical`` /
``canonical_fields`` / ``stored_events``; the Spark partition reader's ``_KEYED``/``_PLAIN``
likewise falls back to ``SegmentEvent``): ``test_the_previous_version_reads_headers_carrying_
events_as_events_without_headers`` runs that code on such entries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    EventTooLargeError,
    EventWriterConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    SerializationError,
    StreamConfiguration,
    StreamManager,
)
from readergroup.core.headers import MAX_HEADERS, MAX_HEADERS_BYTES, encode_headers
from readergroup.storage import segment_status
from readergroup.storage.connection_api import Connection
from readergroup.storage.native_append import MIN_EVENTS
from readergroup.storage.scripts import script_source
from readergroup.storage.segment_records import AppendBatch, parse_event, stored_events
from tests.support.async_reader_adapter import (
    flavoured,
    flavoured_factory,
    reader_flavour_fixture,  # noqa: F401 (a fixture)
)
from tests.support.connections import new_scope
from tests.test_rolling_upgrade import previous_version  # noqa: F401 (a fixture)

MAX_EVENT_SIZE = 4096


@pytest.fixture
def scope(connection: Connection) -> str:
    """A fresh scope with a one-segment stream ``s`` (events up to 4 KiB)."""
    name = new_scope(connection)
    StreamManager(connection).create_stream(
        name,
        "s",
        StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1), max_event_size=MAX_EVENT_SIZE),
    )
    return name


@pytest.fixture
def factory(
    connection: Connection, scope: str, reader_flavour: str, request: pytest.FixtureRequest
) -> Iterator[EventStreamClientFactory]:
    """Threaded readers, or asyncio ones (a flavoured test's ``reader_flavour``)."""
    yield from flavoured_factory(connection, scope, reader_flavour, request)


def headers_of(i: int) -> dict[str, bytes]:
    """Event ``i``'s headers: none for every third event, else one or two."""
    if i % 3 == 0:
        return {}
    out = {"trace-id": b"t%d" % i}
    if i % 3 == 2:
        out["bin\u00e9"] = bytes(range(256))[: i % 7]
    return out


def write(factory: EventStreamClientFactory, count: int, linger: float = 0.0) -> None:
    config = EventWriterConfig(linger=linger)
    with factory.create_event_writer("s", BytesSerializer(), config) as writer:
        for i in range(count):
            key = None if i % 2 else f"k{i % 5}"
            writer.write_event(b"e%d" % i, key, headers=headers_of(i) or None)


def read_all(factory: EventStreamClientFactory, connection: Connection, count: int) -> list[Any]:
    scope = factory.scope
    ReaderGroupManager(scope, connection).create_reader_group(
        "g", ReaderGroupConfig(streams=[f"{scope}/s"])
    )
    got: list[Any] = []
    with factory.create_reader("r", "g", BytesSerializer()) as reader:
        while len(got) < count:
            event = reader.read_next_event(timeout=5)
            assert event.is_event, f"only {len(got)} of {count} events read"
            got.append(event)
    return got


@flavoured("sync", "async")
def test_headers_round_trip_through_the_writer_reader_and_batch_client(
    connection: Connection, factory: EventStreamClientFactory
) -> None:
    """Small rounds (the script path on Redis): every event reads back with its headers, and
    those without headers read back with none."""
    write(factory, 12)
    for event in read_all(factory, connection, 12):
        i = int(event.event[1:])
        assert dict(event.headers) == headers_of(i)
        assert event.routing_key == (None if i % 2 else f"k{i % 5}")
    batch = list(factory.create_batch_client().read_events("s"))
    assert [dict(e.headers) for e in batch] == [headers_of(i) for i in range(12)]
    assert [e.routing_key for e in batch] == [None if i % 2 else f"k{i % 5}" for i in range(12)]
    assert [e.payload for e in batch] == [b"e%d" % i for i in range(12)]


def test_headers_are_read_only_and_empty_when_none(factory: EventStreamClientFactory) -> None:
    write(factory, 3)
    events = list(factory.create_batch_client().read_events("s"))
    assert events[0].headers == {} and events[1].headers == {"trace-id": b"t1"}
    with pytest.raises(TypeError):
        events[1].headers["x"] = b"y"  # type: ignore[index]


def test_a_bulk_round_carries_headers_natively(redis_url: str) -> None:
    """A round of 200 events (the native MULTI/XADD path) stores the same entries as rounds
    of 25 (the script path): headers where given, no ``h`` field where not."""
    scope = new_redis_scope(redis_url)
    data = [
        (None if i % 2 else f"k{i % 5}", b"e%d" % i, 1_700_000 + i, pack(headers_of(i)))
        for i in range(200)
    ]
    client: Any = redis.Redis.from_url(redis_url)
    client.script_load(script_source("append_events"))  # no NOSCRIPT reply in the counts
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        segments = factory.connection.segments
        StreamManager(factory.connection).create_stream(scope, "small")
        evalsha = _calls(client, "evalsha")
        bulk = [
            AppendBatch.of(scope, "s", 0, "w", 1 + n, data[n * 100 : n * 100 + 100], 4096)
            for n in range(2)
        ]
        assert [r.status for r in segments.append(bulk)] == [segment_status.OK] * 2
        assert _calls(client, "evalsha") == evalsha  # native: no script ran
        for n in range(8):
            small = data[n * 25 : n * 25 + 25]
            assert len(small) < MIN_EVENTS
            batch = AppendBatch.of(scope, "small", 0, "w", 1 + n, small, 4096)
            assert segments.append([batch])[0].status == segment_status.OK
        assert _calls(client, "evalsha") == evalsha + 8
        batch_client = factory.create_batch_client()
        natives = list(batch_client.read_events("s"))
        small_events = list(batch_client.read_events("small"))
        assert list(map(stored, natives)) == list(map(stored, small_events))
        assert [dict(e.headers) for e in natives] == [headers_of(i) for i in range(200)]
        raw = client.xrange(factory.connection.keys.segment(scope, "s", 0).events, "-", "+")
        for (_, fields), i in zip(raw, range(200), strict=True):
            assert (b"h" in fields) == bool(headers_of(i))
    client.close()


def test_an_event_without_headers_is_stored_exactly_as_before(redis_url: str) -> None:
    """No ``h`` field: the entry is ``[k key] p w t b``, as before headers existed, on the
    script path (one event) and on the native path (a bulk round, with two events with
    headers in it: only they have ``h``, between ``k`` and ``p``)."""
    scope = new_redis_scope(redis_url)
    client: Any = redis.Redis.from_url(redis_url)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        config = EventWriterConfig(linger=0.2)
        with factory.create_event_writer("s", BytesSerializer(), config) as writer:
            writer.write_event(b"x", "key").result(10)
            writer.write_event(b"y").result(10)
            futures = [writer.write_event(b"z%d" % i, f"k{i}") for i in range(100)]
            writer.write_event(b"h", "key", headers={"a": b"1"})  # in the same bulk round
            writer.write_event(b"i", headers={"a": b"1"})
            writer.flush()
        events_key = factory.connection.keys.segment(scope, "s", 0).events
        entries = client.xrange(events_key, "-", "+")
        names = [list(fields) for _, fields in entries]  # in stored order
        assert names[0] == [b"k", b"p", b"w", b"t", b"b"]
        assert names[1] == [b"p", b"w", b"t", b"b"]
        assert all(n == [b"k", b"p", b"w", b"t", b"b"] for n in names[2:102])
        assert names[102:] == [[b"k", b"h", b"p", b"w", b"t", b"b"], [b"h", b"p", b"w", b"t", b"b"]]
        assert [f.result().offset for f in futures] == list(range(2, 102))
    client.close()


def test_invalid_headers_raise_typed_errors_naming_the_header_and_fail_nothing_else(
    factory: EventStreamClientFactory,
) -> None:
    with factory.create_event_writer("s", BytesSerializer()) as writer:
        good = writer.write_event(b"before", "k", headers={"a": b"1"})
        with pytest.raises(SerializationError, match=r"'n'.*str value"):
            writer.write_event(b"x", "k", headers={"n": "text"})  # type: ignore[dict-item]
        with pytest.raises(SerializationError, match="header key 7"):
            writer.write_event(b"x", "k", headers={7: b"v"})  # type: ignore[dict-item]
        with pytest.raises(SerializationError, match="header key ''"):
            writer.write_event(b"x", "k", headers={"": b"v"})
        with pytest.raises(SerializationError, match="mapping"):
            writer.write_event(b"x", "k", headers=[("a", b"b")])  # type: ignore[arg-type]
        many = {f"h{i}": b"" for i in range(MAX_HEADERS + 1)}
        with pytest.raises(EventTooLargeError, match=f"{MAX_HEADERS + 1} headers"):
            writer.write_event(b"x", "k", headers=many)
        huge = {"big": b"x" * MAX_HEADERS_BYTES}
        with pytest.raises(EventTooLargeError, match="header 'big'"):
            writer.write_event(b"x", "k", headers=huge)
        # headers count against max_event_size together with the payload
        with pytest.raises(EventTooLargeError, match="of them headers"):
            writer.write_event(b"x" * (MAX_EVENT_SIZE - 10), "k", headers={"h": b"y" * 20})
        after = writer.write_event(b"after", "k", headers={"b": bytearray(b"2")})
        writer.flush()
    assert good.result().offset == 0 and after.result().offset == 1
    stored = list(factory.create_batch_client().read_events("s"))
    assert [(e.payload, dict(e.headers)) for e in stored] == [
        (b"before", {"a": b"1"}),
        (b"after", {"b": b"2"}),
    ]


def test_headers_garbled_in_redis_raise_a_typed_error_naming_the_event() -> None:
    """An ``h`` field not written by this library: reading its headers raises, the rest of
    the event reads."""
    entry = [b"5-0", [b"h", b"\xc1", b"p", b"x", b"w", b"1", b"t", b"2", b"b", b"0"]]
    event = parse_event(3, entry)
    assert event.payload == b"x" and event.routing_key is None
    with pytest.raises(SerializationError, match="segment 3 offset 4"):
        event.headers  # noqa: B018
    listed = [b"5-0", [b"h", msgpack.packb([1, 2]), b"p", b"x", b"w", b"1", b"t", b"2"]]
    with pytest.raises(SerializationError, match="not a map of str to bytes"):
        parse_event(3, listed).headers  # noqa: B018


def test_entries_in_any_field_order_decode_their_headers() -> None:
    packed = msgpack.packb({"a": b"1"}, use_bin_type=True)
    canonical = [b"k", b"key", b"h", packed, b"p", b"x", b"w", b"1", b"t", b"2", b"b", b"3"]
    reordered = [b"p", b"x", b"h", packed, b"k", b"key", b"t", b"2", b"w", b"1", b"b", b"3"]
    for fields in (canonical, reordered):
        (flat,) = stored_events([[b"1-0", fields]])
        assert flat == (b"1-0", b"key", b"x", b"1", b"2", b"3", packed)
        assert dict(parse_event(0, [b"1-0", fields]).headers) == {"a": b"1"}
    (keyless,) = stored_events([[b"1-0", canonical[2:]]])
    assert keyless == (b"1-0", None, b"x", b"1", b"2", b"3", packed)


def test_a_put_back_after_a_lossy_failover_restores_the_headers(redis_url: str) -> None:
    """The writer's acknowledged batches are appended again, unchanged, where a failover lost
    them (readergroup/client/replay.py): headers included. The loss is simulated on one
    server: the last 5 entries removed and the segment's counters set back, as on a replica
    promoted before it had them."""
    scope = new_redis_scope(redis_url)
    client: Any = redis.Redis.from_url(redis_url)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        keys = factory.connection.keys.segment(scope, "s", 0)
        with factory.create_event_writer("s", BytesSerializer()) as writer:
            for i in range(10):
                if i == 5:  # what a replica 5 appends behind holds
                    replica = {key: client.dump(key) for key in (keys.meta, keys.writers)}
                writer.write_event(b"e%d" % i, "k", headers={"n": b"%d" % i}).result(10)
            before = client.xrange(keys.events, "-", "+")
            client.delete(keys.events)  # the primary dies, the replica takes over
            for entry_id, fields in before[:5]:
                client.xadd(keys.events, fields, id=entry_id)
            for key, dumped in replica.items():
                client.restore(key, 0, dumped, replace=True)
            assert writer.write_event(b"after", "k").result(10).offset == 10
        after = client.xrange(keys.events, "-", "+")
        assert after[:10] == before  # put back exactly: ids and fields, h included
        assert b"h" not in after[10][1]
        read = list(factory.create_batch_client().read_events("s"))
        assert [dict(e.headers) for e in read[:10]] == [{"n": b"%d" % i} for i in range(10)]
    client.close()


OLD_READER = """
import json, sys
from readergroup import EventStreamClientFactory
from readergroup.storage.segment_records import stored_events
import redis
url, scope, events_key = sys.argv[1:4]
with EventStreamClientFactory.from_url(scope, url) as factory:
    batch = [[e.routing_key, e.payload.decode(), e.writer_ms] for e in
             factory.create_batch_client().read_events("s")]
raw = redis.Redis.from_url(url).xrange(events_key, "-", "+")
flat = stored_events([[i, [x for kv in f.items() for x in kv]] for i, f in raw])
import readergroup
print(json.dumps({
    "origin": readergroup.__file__,
    "batch": batch,
    "flat": [[None if t[1] is None else t[1].decode(), t[2].decode(), int(t[3])] for t in flat],
}))
"""


@pytest.mark.slow
def test_the_previous_version_reads_headers_carrying_events_as_events_without_headers(
    redis_url: str,
    previous_version: Path,  # noqa: F811 (the fixture imported above)
) -> None:
    """26dd67a's batch client and ``stored_events`` (the reader's decoding) on entries with
    and without ``h``, keyed and not: the same keys, payloads and writer times, no error."""
    scope = new_redis_scope(redis_url)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        write(factory, 9)
        expected = [
            [e.routing_key, e.payload.decode(), e.writer_ms]
            for e in factory.create_batch_client().read_events("s")
        ]
        assert sum(1 for e in factory.create_batch_client().read_events("s") if e.headers) == 6
        events_key = factory.connection.keys.segment(scope, "s", 0).events
    done = subprocess.run(
        [sys.executable, "-c", OLD_READER, redis_url, scope, events_key],
        cwd=previous_version,
        env={**os.environ, "PYTHONPATH": str(previous_version)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    old = json.loads(done.stdout)
    assert Path(old["origin"]).is_relative_to(previous_version), old["origin"]
    assert old["batch"] == expected
    assert old["flat"] == expected


def new_redis_scope(redis_url: str) -> str:
    """A fresh scope on the suite's Redis with a one-segment stream ``s`` (4 KiB events)."""
    scope = f"h{uuid.uuid4().hex[:10]}"
    with StreamManager.from_url(redis_url) as manager:
        manager.create_scope(scope)
        manager.create_stream(
            scope,
            "s",
            StreamConfiguration(
                scaling_policy=ScalingPolicy.fixed(1), max_event_size=MAX_EVENT_SIZE
            ),
        )
    return scope


def stored(event: Any) -> tuple[Any, ...]:
    """An event as stored, but for the server's time."""
    return (e := event).offset, e.routing_key, e.payload, e.writer_ms, e.byte_offset, e.raw_headers


def pack(headers: dict[str, bytes]) -> bytes:
    return encode_headers(headers, "a test event")


def _calls(client: redis.Redis, command: str) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
