"""Bulk appends as native XADDs in one WATCHed MULTI/EXEC (storage/native_append.py), on a real
Redis: the same entries as append_events.lua, one landing per batch, nothing partial, the
script's refusals, concurrent writers, durable acks and the generated ACL rules."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

from readergroup import (
    BytesSerializer,
    ClientConfig,
    EventStreamClientFactory,
    EventTooLargeError,
    EventWriterConfig,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.admin import acl
from readergroup.core.errors import AckTimeoutError, WrongKeyTypeError
from readergroup.storage import native_append, segment_status
from readergroup.storage.native_append import MIN_EVENTS
from readergroup.storage.scripts import script_source
from readergroup.storage.segment_records import AppendBatch
from readergroup.testing.embedded_redis import LocalRedisServer
from tests.test_ha_acks import replicated  # noqa: F401 (a fixture)

Events = list[tuple[str | None, bytes, int]]


def calls(client: redis.Redis, command: str) -> int:
    stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def events(count: int, tag: str = "e") -> Events:
    return [
        (None if i % 4 == 0 else f"k{i % 9}", f"{tag}{i}".encode() * (1 + i % 3), 1_700_000 + i)
        for i in range(count)
    ]


def batches(scope: str, stream: str, writer: str, first_sequence: int, data: Events) -> Any:
    return [
        AppendBatch.of(scope, stream, 0, writer, first_sequence + n, data[i : i + 100], 1 << 20)
        for n, i in enumerate(range(0, len(data), 100))
    ]


def stored(factory: EventStreamClientFactory, stream: str) -> list[tuple[Any, ...]]:
    """Every entry's offset, key, payload, writer ms and byte offset (not the server time)."""
    return [
        (e.offset, e.routing_key, e.payload, e.writer_ms, e.byte_offset)
        for e in factory.create_batch_client().read_events(stream)
    ]


def test_a_bulk_round_lands_natively_with_the_scripts_entries(redis_url: str, scope: str) -> None:
    data = events(300)
    client = redis.Redis.from_url(redis_url)
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "native")
        sm.create_stream(scope, "script")
    client.script_load(script_source("append_events"))  # no NOSCRIPT reply in the count
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        segments = factory.connection.segments
        exec_before, eval_before = calls(client, "exec"), calls(client, "evalsha")
        replies = segments.append(batches(scope, "native", "w", 1, data))
        assert calls(client, "exec") == exec_before + 1
        assert calls(client, "evalsha") == eval_before  # no script ran
        assert [(r.status, r.first_offset) for r in replies] == [(0, 0), (0, 100), (0, 200)]
        for i in range(0, 300, 30):  # rounds too small for the native path: the script
            assert len(data[i : i + 30]) < MIN_EVENTS
            batch = AppendBatch.of(scope, "script", 0, "w", 1 + i, data[i : i + 30], 1 << 20)
            assert segments.append([batch])[0].status == segment_status.OK
        assert calls(client, "evalsha") == eval_before + 10
        native, script = stored(factory, "native"), stored(factory, "script")
        assert native == script and len(native) == 300
        states = (
            segments.segment_states(scope, "native", [0])[0],
            segments.segment_states(scope, "script", [0])[0],
        )
        assert states[0].tail == states[1].tail == 300
        assert states[0].bytes == states[1].bytes == sum(len(p) for _, p, _ in data)
        times = [e.server_ms for e in factory.create_batch_client().read_events("native")]
        assert times == sorted(times) and replies[0].server_ms == times[0]
    client.close()


def test_a_resent_bulk_round_lands_once(redis_url: str, scope: str) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        segments = factory.connection.segments
        sent = batches(scope, "s", "w", 1, events(200))
        assert [r.status for r in segments.append(sent)] == [0, 0]
        again = segments.append(sent)  # a retry after a lost reply: same sequence numbers
        assert [r.status for r in again] == [segment_status.DUPLICATE] * 2
        assert segments.segment_states(scope, "s", [0])[0].tail == 200
        assert len(stored(factory, "s")) == 200


def test_bulk_rounds_the_script_would_refuse_write_nothing(redis_url: str, scope: str) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        sm.create_stream(scope, "sealed")
    client = redis.Redis.from_url(redis_url)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        segments = factory.connection.segments
        # an event over the limit: the batch is refused naming it
        big = AppendBatch.of(scope, "s", 0, "w", 1, [*events(99), (None, b"x" * 50, 0)], 40)
        reply = segments.append([big])[0]
        assert isinstance(reply.error, EventTooLargeError) and "event 100" in str(reply.error)
        # a sealed segment: refused with its tail
        segments.seal(scope, "sealed", 0)
        assert segments.append(batches(scope, "sealed", "w", 1, events(100)))[0].status == (
            segment_status.SEALED
        )
        # a rogue key of the wrong type refuses its own batch only
        rogue = factory.connection.keys.segment(scope, "s", 1).events
        client.set(rogue, "not a stream")
        mixed = [
            AppendBatch.of(scope, "s", 0, "w", 2, events(100), 1 << 20),
            AppendBatch.of(scope, "s", 1, "w", 3, events(100), 1 << 20),
        ]
        ok, refused = segments.append(mixed)
        assert ok.status == segment_status.OK and refused.error is not None
        assert "WRONGTYPE" in str(refused.error) or isinstance(refused.error, WrongKeyTypeError)
        states = segments.segment_states(scope, "s", [0, 1])
        assert (states[0].tail, states[1].tail) == (100, 0)  # counters never ran ahead
        assert segments.segment_states(scope, "sealed", [0])[0].tail == 0
    client.close()


def test_concurrent_bulk_writers_on_one_segment_lose_and_double_nothing(
    redis_url: str, scope: str
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    client = redis.Redis.from_url(redis_url)
    exec_before = calls(client, "exec")
    config = EventWriterConfig(linger=0.02)  # rounds of many events
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:

        def write(tag: str) -> None:
            with factory.create_event_writer("s", BytesSerializer(), config) as writer:
                for i in range(1500):
                    writer.write_event(f"{tag}-{i}".encode(), routing_key=tag)

        threads = [threading.Thread(target=write, args=(f"w{n}",)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        entries = stored(factory, "s")
        assert [e[0] for e in entries] == list(range(4500))  # dense offsets, nothing twice
        for tag in ("w0", "w1", "w2"):  # each writer's events in write order
            mine = [e[2] for e in entries if e[1] == tag]
            assert mine == [f"{tag}-{i}".encode() for i in range(1500)]
        sizes = [len(e[2]) for e in entries]
        assert [e[4] for e in entries] == [sum(sizes[:i]) for i in range(4500)]
        state = factory.connection.segments.segment_states(scope, "s", [0])[0]
        assert (state.tail, state.bytes) == (4500, sum(sizes))
    assert calls(client, "exec") > exec_before  # some rounds went natively
    client.close()


def test_native_appends_wait_for_replicas(
    replicated: tuple[LocalRedisServer, LocalRedisServer],  # noqa: F811
) -> None:
    primary, replica = replicated
    with StreamManager.from_url(primary.url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "s")
    config = ClientConfig(acks="replicas=1")
    with EventStreamClientFactory.from_url("ha", primary.url, config) as factory:
        replies = factory.connection.segments.append(batches("ha", "s", "w", 1, events(200)))
        assert [r.status for r in replies] == [0, 0]
        events_key = factory.connection.keys.segment("ha", "s", 0).events
    follower = redis.Redis(port=replica.port)
    assert follower.xlen(events_key) == 200  # on the replica when acknowledged
    follower.close()


def test_native_appends_without_enough_replicas_fail_retriably_and_land_once(
    private_redis: LocalRedisServer,
) -> None:
    with StreamManager.from_url(private_redis.url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "s")
    config = ClientConfig(acks="replicas=1", ack_timeout=0.05)
    with EventStreamClientFactory.from_url("ha", private_redis.url, config) as factory:
        segments = factory.connection.segments
        sent = batches("ha", "s", "w", 1, events(200))
        for _ in range(2):  # the first try lands unacknowledged; the retry is recognised
            with pytest.raises(AckTimeoutError) as caught:
                segments.append(sent)
            assert caught.value.retriable
        assert segments.segment_states("ha", "s", [0])[0].tail == 200


def test_a_writer_with_the_generated_acl_rules_appends_natively(
    private_redis: LocalRedisServer,
) -> None:
    url = private_redis.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope("acl")
        sm.create_stream("acl", "s")
    admin = redis.Redis.from_url(url)
    admin.execute_command(*acl.rules("writer", "acl").setuser_args("wr", "secret"))
    config = ClientConfig(redis_options={"username": "wr", "password": "secret"})
    exec_before, eval_before = calls(admin, "exec"), calls(admin, "evalsha")
    with EventStreamClientFactory.from_url("acl", url, config) as factory:
        replies = factory.connection.segments.append(batches("acl", "s", "w", 1, events(200)))
        assert [r.status for r in replies] == [0, 0]
    assert calls(admin, "exec") == exec_before + 1 and calls(admin, "evalsha") == eval_before
    admin.close()


def test_the_server_is_asked_once_per_connection_and_a_restart_begins_a_new_epoch(
    private_redis: LocalRedisServer,
) -> None:
    """``INFO server`` (the run_id that decides the epoch) is sent on a connection's first
    native round only; after a restart (a new socket to a new server process) it is asked
    again and the entries carry a new epoch."""
    url, scope = private_redis.url, "epochs"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s")
    client = redis.Redis.from_url(url)

    def epochs() -> list[int]:
        with EventStreamClientFactory.from_url(scope, url) as reading:
            _, key, _ = reading.connection.keys.segment(scope, "s", 0)
        return sorted({int(entry_id.split(b"-")[1]) for entry_id, _ in client.xrange(key)})

    with EventStreamClientFactory.from_url(scope, url) as factory:
        segments = factory.connection.segments
        for round_number in range(3):
            if round_number == 1:  # the connection asked on its first round
                info_before = calls(client, "info")
            data = events(200, tag=f"r{round_number}")
            replies = segments.append(batches(scope, "s", "w", 1 + 2 * round_number, data))
            assert [r.status for r in replies] == [segment_status.OK, segment_status.OK]
        assert calls(client, "info") == info_before + 1  # only the count's own INFO
        before = epochs()
        assert len(before) == 1
        private_redis.restart()
        client = redis.Redis.from_url(url)
        data = events(200, tag="after")
        factory.connection.client.connection_pool.disconnect()  # its sockets died with the server
        exec_before = calls(client, "exec")
        replies = segments.append(batches(scope, "s", "w", 7, data))
        assert [r.status for r in replies] == [segment_status.OK, segment_status.OK]
        assert calls(client, "exec") == exec_before + 1  # natively
        after = epochs()
        assert len(after) == 2 and after[0] == before[0]  # a new epoch began after the restart


def test_a_bulk_round_reads_its_queued_replies_without_a_read_call_per_event(
    redis_url: str, scope: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each queued ``XADD`` answers ``QUEUED``; reading those through redis-py's
    ``read_response`` one by one cost more client time than the rest of an event's work (the
    writer's throughput bottleneck). They are consumed straight from the hiredis reader: a
    round's ``read_response`` calls do not grow with its events."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    reads = 0
    original = redis.connection.AbstractConnection.read_response

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return original(self, *args, **kwargs)

    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        segments = factory.connection.segments
        sent = batches(scope, "s", "w", 1, events(1000))
        monkeypatch.setattr(redis.connection.AbstractConnection, "read_response", counted)
        replies = segments.append(sent)
        monkeypatch.undo()
        assert [r.first_offset for r in replies] == list(range(0, 1000, 100))
        assert len(stored(factory, "s")) == 1000
    # WATCH, TIME, INFO, three reads per batch, EXEC, a new connection's handshake: not one
    # per event (a read per queued XADD made it over 1,000)
    assert reads < 100


def test_without_the_hiredis_reader_bulk_rounds_land_the_same(
    redis_url: str, scope: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where redis-py's hiredis parser is not there (another parser, another redis-py layout),
    the queued replies are read one by one and the entries are the same."""
    data = events(300)
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "direct")
        sm.create_stream(scope, "one_by_one")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        segments = factory.connection.segments
        segments.append(batches(scope, "direct", "w", 1, data))
        monkeypatch.setattr(native_append, "_HIREDIS_PARSER", None)
        reads = 0
        original = redis.connection.AbstractConnection.read_response

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal reads
            reads += 1
            return original(self, *args, **kwargs)

        monkeypatch.setattr(redis.connection.AbstractConnection, "read_response", counted)
        replies = segments.append(batches(scope, "one_by_one", "w", 1, data))
        monkeypatch.undo()
        assert [r.status for r in replies] == [segment_status.OK] * 3
        assert reads > len(data)  # this path was taken
        assert stored(factory, "direct") == stored(factory, "one_by_one")


def test_writer_futures_settle_with_their_offsets_with_and_without_callbacks(
    redis_url: str, scope: str
) -> None:
    """Futures of a bulk round are settled in line (no pointer object built per event until
    asked); those with callbacks run them once, already done, with the same pointer."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    seen: list[tuple[int, int, bool]] = []
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        writer = factory.create_event_writer("s", BytesSerializer())
        futures = [writer.write_event(b"e%d" % i, f"k{i % 5}") for i in range(400)]
        for future in futures[::7]:
            future.add_done_callback(
                lambda done: seen.append((done.result().segment, done.result().offset, done.done()))
            )
        writer.flush()
        writer.close()
        pointers = [future.result() for future in futures]
        assert [(p.segment, p.offset) for p in pointers] == [(0, i) for i in range(400)]
        assert pointers[3] == futures[3].result()
        payloads = [e.payload for e in factory.create_batch_client().read_events("s")]
        assert payloads == [b"e%d" % i for i in range(400)]
    assert sorted(seen) == [(0, i, True) for i in range(0, 400, 7)]
