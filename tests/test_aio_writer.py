"""The asyncio writer (issue 29): the threaded writer's behaviour, awaited, on both backends
(``connection``: memory and a real Redis) where the behaviour is backend-independent, and on
a real Redis for outages, lost replies and backpressure."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from readergroup import (
    BytesSerializer,
    ClientConfig,
    EventStreamClientFactory,
    EventWriterConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamClientFactory, EventPointer
from readergroup.core.errors import (
    AccessDeniedError,
    EventTooLargeError,
    InvalidConfigError,
    ReaderGroupError,
    SerializationError,
    StreamNotFoundError,
    StreamSealedError,
    UnsafeServerConfigError,
    WriteFailedError,
    WriterClosedError,
)
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_connection_api import AsyncConnectionApi
from readergroup.storage.connection_api import Connection
from readergroup.testing.aio_memory import AsyncMemoryConnection
from readergroup.testing.memory_connection import MemoryConnection
from tests.support.connections import new_scope
from tests.support.proxy import ReplyDroppingProxy
from tests.support.tls import TlsProxy, make_certificates

FOUR = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
FAST_GROUP = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.1}


def async_view(connection: Connection, request: pytest.FixtureRequest) -> AsyncConnectionApi:
    """The asyncio connection to what ``connection`` reaches (the same memory, or Redis)."""
    if isinstance(connection, MemoryConnection):
        return AsyncMemoryConnection(connection)
    return AsyncConnection.from_url(request.getfixturevalue("redis_url"))


@pytest.fixture
def scope(connection: Connection) -> str:
    """A fresh scope with a stream ``s`` of four segments."""
    name = new_scope(connection)
    StreamManager(connection).create_stream(name, "s", FOUR)
    return name


@pytest.fixture
def factory(connection: Connection, scope: str) -> Iterator[EventStreamClientFactory]:
    with EventStreamClientFactory(scope, connection) as made:
        yield made


@pytest.fixture
def aio(connection: Connection, scope: str, request: pytest.FixtureRequest) -> Any:
    """A coroutine function making the scope's asyncio factory (on the test's loop)."""

    def make() -> AsyncEventStreamClientFactory:
        view = async_view(connection, request)
        return AsyncEventStreamClientFactory(scope, view, owns_connection=True)

    return make


def stored(factory: EventStreamClientFactory, stream: str = "s") -> list[Any]:
    return list(factory.create_batch_client().read_events(stream))


def per_key(events: list[Any]) -> dict[str | None, list[bytes]]:
    by_key: dict[str | None, list[bytes]] = defaultdict(list)
    for event in events:
        by_key[event.routing_key].append(event.payload)
    return by_key


# -- behaviour on both backends --------------------------------------------------------------
def test_an_awaited_write_returns_where_the_event_landed(
    aio: Any, factory: EventStreamClientFactory
) -> None:
    async def main() -> list[EventPointer]:
        async with aio() as made:
            writer = await made.create_event_writer("s", UTF8StringSerializer())
            return [await writer.write_event(f"e{i}", routing_key="k") for i in range(5)]

    pointers = asyncio.run(main())
    events = stored(factory)
    assert [e.payload for e in events] == [f"e{i}".encode() for i in range(5)]
    assert [(p.segment, p.offset) for p in pointers] == [(e.segment, e.offset) for e in events]


def test_pipelined_sends_land_once_each_in_write_order_per_key(
    aio: Any, factory: EventStreamClientFactory
) -> None:
    async def main() -> list[EventPointer]:
        async with aio() as made:
            writer = await made.create_event_writer(
                "s", UTF8StringSerializer(), EventWriterConfig(max_batch_events=7)
            )
            futures = [await writer.send(f"{i}", routing_key=f"k{i % 13}") for i in range(2000)]
            await writer.flush()
            assert all(f.done() for f in futures)
            return [f.result() for f in futures]

    pointers = asyncio.run(main())
    events = stored(factory)
    assert sorted(int(e.payload) for e in events) == list(range(2000))
    for numbers in per_key(events).values():
        assert [int(n) for n in numbers] == sorted(int(n) for n in numbers)
    assert {(p.segment, p.offset) for p in pointers} == {(e.segment, e.offset) for e in events}


def test_a_send_future_is_awaitable_from_many_tasks_and_an_asyncio_future_on_demand(
    aio: Any, factory: EventStreamClientFactory
) -> None:
    async def main() -> None:
        async with aio() as made:
            lingers = EventWriterConfig(linger=0.05)  # so the waiters wait
            writer = await made.create_event_writer("s", UTF8StringSerializer(), lingers)
            future = await writer.send("one", routing_key="k")
            assert not future.done()
            with pytest.raises(asyncio.InvalidStateError):
                future.result()

            async def wait() -> EventPointer:
                return await future

            first, second = asyncio.create_task(wait()), asyncio.create_task(wait())
            await asyncio.sleep(0)
            first.cancel()  # cancels that wait only: not the write, not the other waiter
            pointer = await second
            assert first.cancelled() and future.result() == pointer
            done, _ = await asyncio.wait([future.as_future()])
            assert done.pop().result() == pointer == await future
            assert future.exception() is None

    asyncio.run(main())
    assert [e.payload for e in stored(factory)] == [b"one"]


def test_sizes_serializers_headers_and_routing_keys_are_checked_at_send(
    aio: Any, factory: EventStreamClientFactory, connection: Connection, scope: str
) -> None:
    limit = 1024
    StreamManager(connection).create_stream(
        scope, "small", StreamConfiguration(max_event_size=limit)
    )

    async def main() -> None:
        async with aio() as made:
            writer = await made.create_event_writer("small", BytesSerializer())
            await writer.write_event(b"", routing_key="k")
            await writer.write_event(b"m" * limit, routing_key="k")
            with pytest.raises(EventTooLargeError, match="exceeds max_event_size"):
                await writer.write_event(b"m" * (limit + 1), routing_key="k")
            with pytest.raises(EventTooLargeError, match="of them headers"):
                await writer.send(b"m" * (limit - 2), routing_key="k", headers={"h": b"xx"})
            with pytest.raises(SerializationError):
                await writer.send("not bytes", routing_key="k")  # type: ignore[arg-type]
            returns_str = await made.create_event_writer("small", _ReturnsStr())
            with pytest.raises(SerializationError, match="encode it in the serializer"):
                await returns_str.send("a str")
            with pytest.raises(SerializationError, match="header"):
                await writer.send(b"x", headers={"h": "not bytes"})  # type: ignore[dict-item]
            with pytest.raises(TypeError, match="routing_key"):
                await writer.send(b"x", routing_key=7)  # type: ignore[arg-type]
            await writer.write_event(b"with", routing_key="k", headers={"a": b"1", "b": b""})
            await writer.write_event(bytearray(b"like"))
            with pytest.raises(StreamNotFoundError):
                await made.create_event_writer("missing", BytesSerializer())

    asyncio.run(main())
    events = stored(factory, "small")
    assert [len(e.payload) for e in events] == [0, limit, 4, 4]  # the refused changed nothing
    assert dict(events[2].headers) == {"a": b"1", "b": b""} and not events[0].headers


class _ReturnsStr:
    """A serializer returning a str, not bytes (a common mistake)."""

    def serialize(self, event: str) -> Any:
        return event

    def deserialize(self, data: bytes) -> str:
        return data.decode()


def test_a_sealed_stream_fails_writes_and_flush_with_stream_sealed_error(
    aio: Any, connection: Connection, scope: str
) -> None:
    async def main() -> None:
        async with aio() as made:
            writer = await made.create_event_writer("s", UTF8StringSerializer())
            await writer.write_event("one")
            StreamManager(connection).seal_stream(scope, "s")
            with pytest.raises(StreamSealedError):
                await writer.write_event("two")
            with pytest.raises(StreamSealedError):
                await writer.flush()
            await writer.flush()  # reported once
            await writer.close()
            with pytest.raises(WriterClosedError):
                await writer.send("three")

    asyncio.run(main())


def test_writes_keep_per_key_order_across_a_split_and_a_merge(
    aio: Any, factory: EventStreamClientFactory, connection: Connection, scope: str
) -> None:
    """Scaling while the asyncio writer writes: batches refused by a sealed segment are
    re-routed to the successors in write order, and every generation takes writes."""
    manager = StreamManager(connection)
    keys = 16

    async def main() -> tuple[list[int], list[int]]:
        async with aio() as made:
            writer = await made.create_event_writer("s", UTF8StringSerializer())

            async def burst(start: int) -> None:
                for i in range(start, start + 400):
                    await writer.send(f"{i}", routing_key=f"k{i % keys}")
                await writer.flush()

            await burst(0)
            info = manager.get_stream_info(scope, "s")
            ordered = sorted(info.active_segments, key=lambda segment: segment.low)
            first, second = ordered[0].segment_id, ordered[1].segment_id
            split = manager.scale_stream(scope, "s", [first], _halves(info, first))
            await burst(400)  # metadata cached (metadata_ttl): the seals re-route these
            joined = _joined(manager, scope, split[1], second)
            merged = manager.scale_stream(scope, "s", [split[1], second], joined)
            await burst(800)
            return split, merged

    split, merged = asyncio.run(main())
    events = stored(factory)
    assert sorted(int(e.payload) for e in events) == list(range(1200))
    for numbers in per_key(events).values():
        assert [int(n) for n in numbers] == sorted(int(n) for n in numbers)
    assert {*split, *merged} <= {e.segment for e in events}


def _halves(info: Any, segment: int) -> list[tuple[float, float]]:
    record = next(s for s in info.active_segments if s.segment_id == segment)
    middle = (record.low + record.high) / 2
    return [(record.low, middle), (middle, record.high)]


def _joined(manager: StreamManager, scope: str, a: int, b: int) -> list[tuple[float, float]]:
    active = {s.segment_id: s for s in manager.get_stream_info(scope, "s").active_segments}
    low = min(active[a].low, active[b].low)
    high = max(active[a].high, active[b].high)
    return [(low, high)]


def test_cancelled_awaiters_never_cancel_or_duplicate_their_writes(
    aio: Any, factory: EventStreamClientFactory
) -> None:
    """1,000 tasks each awaiting write_event, a random half of them cancelled at random
    moments (waiting for room, queued, in flight, done): every event whose write_event began
    is in the stream exactly once, in write order per key; only a task cancelled before it
    ever ran wrote nothing."""
    rng = random.Random(29)
    count = 1000
    began: set[int] = set()

    async def main() -> int:
        async with aio() as made:
            writer = await made.create_event_writer(
                "s", BytesSerializer(), EventWriterConfig(max_in_flight_bytes=1024 * 1024)
            )

            async def write(i: int) -> EventPointer:
                began.add(i)  # (no await between this and write_event's queueing)
                payload = b"%d:" % i + b"x" * rng.choice([10, 60_000])
                return await writer.write_event(payload, routing_key=f"k{i % 5}")

            tasks = []
            cancelled = 0
            for i in range(count):
                tasks.append(asyncio.create_task(write(i)))
                if rng.random() < 0.3:
                    await asyncio.sleep(rng.choice([0, 0, 0.0005]))
                awaiting = [t for n, t in enumerate(tasks) if n in began and not t.done()]
                for victim in rng.sample(awaiting, min(len(awaiting), rng.choice([0, 1, 2]))):
                    cancelled += victim.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(r, (EventPointer, asyncio.CancelledError)) for r in results)
            await writer.flush()
            return cancelled

    cancelled = asyncio.run(main())
    assert cancelled > 100
    events = stored(factory)
    numbers = [int(e.payload.split(b":")[0]) for e in events]
    assert sorted(numbers) == sorted(began)  # every one begun, once
    for payloads in per_key(events).values():
        order = [int(p.split(b":")[0]) for p in payloads]
        assert order == sorted(order)


def test_sync_and_async_writers_share_a_stream_and_a_sync_reader_reads_all_in_key_order(
    aio: Any, factory: EventStreamClientFactory, connection: Connection, scope: str
) -> None:
    count = 300
    sync_writer = factory.create_event_writer("s", UTF8StringSerializer())

    def write_sync() -> None:
        for i in range(count):
            sync_writer.write_event(f"sync-{i}", routing_key=f"k{i % 7}")
        sync_writer.flush()

    async def main() -> None:
        async with aio() as made:
            writer = await made.create_event_writer("s", UTF8StringSerializer())
            thread = threading.Thread(target=write_sync)
            thread.start()
            for i in range(count):
                if i % 3:
                    await writer.send(f"async-{i}", routing_key=f"k{i % 7}")
                else:
                    await writer.write_event(f"async-{i}", routing_key=f"k{i % 7}")
            await writer.flush()
            thread.join(60)

    asyncio.run(main())
    sync_writer.close()
    groups = ReaderGroupManager(scope, connection)
    groups.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST_GROUP))
    read: list[Any] = []
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        while (event := reader.read_next_event(timeout=1.0)).event is not None:
            read.append(event)
    assert len(read) == 2 * count
    by_writer_key: dict[tuple[str, str | None], list[int]] = defaultdict(list)
    for event in read:
        origin, number = event.event.split("-")
        by_writer_key[(origin, event.routing_key)].append(int(number))
    assert {origin for origin, _ in by_writer_key} == {"sync", "async"}
    for numbers in by_writer_key.values():
        assert numbers == sorted(numbers)


class LoopTicks:
    """Counts how often a task asking to run every 10 ms ran: the event loop kept running
    (nothing blocked it) while it grows."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0.01)

    def stop(self) -> None:
        self._task.cancel()


# -- Redis: lost replies, outages, backpressure ------------------------------------------------
def _redis_scope(url: str, config: StreamConfiguration | None = None) -> str:
    with StreamManager.from_url(url) as manager:
        name = new_scope(manager.connection)
        manager.create_stream(name, "s", config or StreamConfiguration())
    return name


def _payloads(url: str, scope: str) -> list[bytes]:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        return [e.payload for e in stored(factory)]


def test_a_lost_reply_does_not_duplicate_events(redis_handle: Any) -> None:
    scope = _redis_scope(redis_handle.url)
    target = redis.Redis.from_url(redis_handle.url).connection_pool.connection_kwargs

    async def main(proxy: ReplyDroppingProxy) -> None:
        async with AsyncEventStreamClientFactory.from_url(scope, proxy.url) as made:
            writer = await made.create_event_writer("s", UTF8StringSerializer())
            await writer.write_event("warm-up", routing_key="k")
            proxy.drop_next_reply()
            futures = [await writer.send(f"e{i}", routing_key="k") for i in range(100)]
            await writer.flush()
            assert proxy.dropped == 1
            assert all(f.done() and f.exception() is None for f in futures)

    with ReplyDroppingProxy(target["host"], target["port"]) as proxy:
        asyncio.run(main(proxy))
    assert _payloads(redis_handle.url, scope) == [b"warm-up"] + [b"e%d" % i for i in range(100)]


def test_events_fail_by_their_delivery_timeout_while_redis_is_down_and_writes_resume(
    private_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis stopped (metadata expired too, ttl 0): an event fails with WriteFailedError at
    its own deadline, the retries are logged as the threaded writer logs them, the loop stays
    responsive meanwhile, and once Redis is back the writer writes again."""
    scope = _redis_scope(private_redis.url)
    config = EventWriterConfig(delivery_timeout=1.0)

    async def main() -> int:
        expired = ClientConfig(metadata_ttl=0.0)
        async with AsyncEventStreamClientFactory.from_url(
            scope, private_redis.url, expired
        ) as made:
            writer = await made.create_event_writer("s", BytesSerializer(), config)
            await writer.write_event(b"kept", routing_key="k")
            private_redis.stop()
            ticks = LoopTicks()
            with pytest.raises(WriteFailedError) as caught:
                await writer.write_event(b"lost", routing_key="k")
            assert caught.value.retriable and caught.value.deadline is not None
            with pytest.raises(WriteFailedError):
                await writer.flush()
            ticks.stop()
            private_redis.start()
            await writer.write_event(b"again", routing_key="k")
            return ticks.count

    with caplog.at_level(logging.WARNING, logger="readergroup.client.writer"):
        ticks = asyncio.run(main())
    assert ticks > 10  # the loop ran while the sender retried
    assert any(
        "retrying until each event's delivery_timeout" in r.getMessage() for r in caplog.records
    )
    assert _payloads(private_redis.url, scope) == [b"kept", b"again"]


def test_a_full_writer_awaits_room_then_raises_after_max_block(redis_handle: Any) -> None:
    """max_in_flight_bytes: a send beyond it awaits room (the loop keeps running) and, with
    Redis not answering (a partition), raises WriteFailedError after max_block; nothing of
    the refused event is queued."""
    scope = _redis_scope(redis_handle.url)
    target = redis.Redis.from_url(redis_handle.url).connection_pool.connection_kwargs
    config = EventWriterConfig(
        max_in_flight_bytes=1024 * 1024, max_block=0.3, delivery_timeout=60.0
    )

    async def main(proxy: ReplyDroppingProxy) -> None:
        socket_timeout = ClientConfig(socket_timeout=2.0)  # the blackholed round times out
        async with AsyncEventStreamClientFactory.from_url(scope, proxy.url, socket_timeout) as made:
            writer = await made.create_event_writer("s", BytesSerializer(), config)
            await writer.write_event(b"first", routing_key="k")
            proxy.blackhole()
            held = [await writer.send(b"x" * 300_000, routing_key="k") for _ in range(3)]
            ticks = LoopTicks()
            with pytest.raises(WriteFailedError, match="no room for the event within max_block"):
                await writer.send(b"y" * 300_000, routing_key="k")
            assert ticks.count > 5
            ticks.stop()
            with pytest.raises(TimeoutError, match="3 events still unacknowledged"):
                await writer.flush(timeout=0.1)
            proxy.blackhole(False)
            await asyncio.gather(*held)

    with ReplyDroppingProxy(target["host"], target["port"]) as proxy:
        asyncio.run(main(proxy))
    payloads = _payloads(redis_handle.url, scope)
    assert payloads[0] == b"first" and len(payloads) == 4  # the refused one is not there


def test_acknowledged_events_a_lossy_failover_lost_are_put_back(redis_url: str) -> None:
    """As the threaded writer does (tests/test_event_headers.py simulates the loss the same
    way): the last 5 entries removed and the counters set back, the writer's next append
    puts them back unchanged first."""
    scope = _redis_scope(redis_url)
    client: Any = redis.Redis.from_url(redis_url)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        keys = factory.connection.keys.segment(scope, "s", 0)

    async def main() -> EventPointer:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as made:
            writer = await made.create_event_writer("s", BytesSerializer())
            for i in range(10):
                if i == 5:
                    replica.update({key: client.dump(key) for key in (keys.meta, keys.writers)})
                await writer.write_event(b"e%d" % i, "k", headers={"n": b"%d" % i})
            before.extend(client.xrange(keys.events, "-", "+"))
            client.delete(keys.events)
            for entry_id, fields in before[:5]:
                client.xadd(keys.events, fields, id=entry_id)
            for key, dumped in replica.items():
                client.restore(key, 0, dumped, replace=True)
            return await writer.write_event(b"after", "k")

    replica: dict[str, Any] = {}
    before: list[Any] = []
    assert asyncio.run(main()).offset == 10
    after = client.xrange(keys.events, "-", "+")
    assert after[:10] == before
    client.close()


def first_command(url: str, config: ClientConfig | None = None) -> BaseException | int:
    """What the first command of a new asyncio connection to ``url`` gives: the server's
    time, or the error it raised."""

    async def main() -> BaseException | int:
        connection = AsyncConnection.from_url(url, config)
        try:
            return await connection.server_time_ms()
        except Exception as exc:
            return exc
        finally:
            await connection.close()

    return asyncio.run(main())


def test_no_password_in_the_asyncio_connection_or_its_errors(redis_handle: Any) -> None:
    secret = "Pw-7q%21x%40Secret%2F42"
    port = redis.Redis.from_url(redis_handle.url).connection_pool.connection_kwargs["port"]
    for bad in (
        f"redsi://app:{secret}@127.0.0.1:{port}/0",
        f"redis+sentinel://app:{secret}@127.0.0.1:x/svc",
        f"redis://app:{secret}@127.0.0.1:{port},127.0.0.1:1/0",
    ):
        with pytest.raises(InvalidConfigError) as caught:
            AsyncConnection.from_url(bad)
        assert "Pw-7q" not in str(caught.value) and "Secret" not in str(caught.value)
    for url in (  # a wrong password; no Sentinel listening
        f"redis://app:{secret}@127.0.0.1:{port}/0",
        f"redis+sentinel://app:{secret}@127.0.0.1:1/svc",
    ):
        assert "Pw-7q" not in repr(AsyncConnection.from_url(url))
        error = first_command(url)
        assert isinstance(error, ReaderGroupError), error
        assert "Pw-7q" not in f"{error!r} {error} {error.__cause__!r}"


def test_the_asyncio_connection_checks_each_new_socket_as_the_threaded_one(
    private_redis: Any,
) -> None:
    """An evicting maxmemory-policy is refused (allow_key_eviction accepts it), and an ACL
    user that may not run INFO gets AccessDeniedError naming what to grant; nothing is
    written either way."""
    raw = redis.Redis.from_url(private_redis.url)
    raw.config_set("maxmemory-policy", "allkeys-lru")
    port = raw.connection_pool.connection_kwargs["port"]
    raw.acl_setuser(
        "noinfo", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-info"]
    )

    refused = first_command(private_redis.url)
    assert isinstance(refused, UnsafeServerConfigError) and "allkeys-lru" in str(refused)
    allowed = ClientConfig(allow_key_eviction=True)
    assert isinstance(first_command(private_redis.url, allowed), int)
    denied = first_command(f"redis://noinfo:pw@127.0.0.1:{port}/0")
    assert isinstance(denied, AccessDeniedError) and "+info" in str(denied)
    assert raw.dbsize() == 0
    raw.close()


def test_a_writer_routing_to_a_successor_left_closed_completes_the_scale(
    connection: Connection, scope: str, factory: EventStreamClientFactory, aio: Any
) -> None:
    """A scale that died after its metadata update left the predecessor open and the
    successors closed: the asyncio writer, refused by a closed successor, completes the scale
    (seals the predecessor, opens the successors) as the threaded writer's cache does, and
    its event lands in a successor well within its delivery_timeout."""
    manager = StreamManager(connection)
    segments = connection.segments
    real_seal = segments.seal_segments
    segments.seal_segments = lambda *_: 1 / 0  # type: ignore[method-assign]
    try:
        with pytest.raises(ZeroDivisionError):
            manager.scale_stream(scope, "s", [0], _halves(manager.get_stream_info(scope, "s"), 0))
    finally:
        segments.seal_segments = real_seal  # type: ignore[method-assign]
    successors = [s for s in manager.stream_state(scope, "s").segments if s > 3]
    assert all(st.sealed for st in manager.segment_states(scope, "s", successors).values())

    async def main() -> EventPointer:
        async with aio() as made:
            config = EventWriterConfig(delivery_timeout=5.0)
            writer = await made.create_event_writer("s", UTF8StringSerializer(), config)
            key = next(
                f"k{i}" for i in range(1000) if _routes_to(manager, scope, f"k{i}", successors)
            )
            return await writer.write_event("after", routing_key=key)

    landed = asyncio.run(main())
    assert landed.segment in successors
    assert manager.segment_states(scope, "s", [0])[0].sealed
    assert [e.payload for e in stored(factory)] == [b"after"]


def _routes_to(manager: StreamManager, scope: str, key: str, segments: list[int]) -> bool:
    from readergroup.core.routing import key_position

    ranges = manager.stream_state(scope, "s").range_map()
    return ranges.segment_at(key_position(key)) in segments


class _FakeClock:
    """Monotonic time that moves only when slept on (the writer's backoffs) or moved."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


def test_each_event_fails_by_its_own_deadline_on_the_injected_clock(private_redis: Any) -> None:
    """With Redis stopped and rounds of one event, every event fails at its own deadline (its
    write time + delivery_timeout on the injected clock, which only the writer's backoffs
    move), not when the round it waited behind gave up; failures come in write order."""
    with StreamManager.from_url(private_redis.url) as manager:
        manager.create_scope("x")
        manager.create_stream("x", "s", FOUR)
    clock = _FakeClock()
    config = EventWriterConfig(delivery_timeout=5.0, max_batch_events=1)
    failed_at: dict[int, float] = {}

    async def main() -> tuple[list[Any], list[tuple[float, float]]]:
        async with AsyncEventStreamClientFactory.from_url("x", private_redis.url) as made:
            writer = await made.create_event_writer(
                "s", UTF8StringSerializer(), config, clock=clock, rng=random.Random(3)
            )
            await writer.write_event("warm", routing_key="k")
            private_redis.stop()
            futures: list[Any] = []
            windows = []
            for group in range(3):  # 3 groups of 50, written as the backoffs move the clock
                before = clock.monotonic()
                for _ in range(50):
                    future = await writer.send(f"g{group}", routing_key=f"k{len(futures)}")
                    index = len(futures)
                    future.as_future().add_done_callback(
                        lambda _, i=index: failed_at.setdefault(i, clock.monotonic())
                    )
                    futures.append(future)
                windows.append((before + 5.0, clock.monotonic() + 5.0))
                while clock.monotonic() < before + 2.0:
                    await asyncio.sleep(0.001)
            await asyncio.gather(*futures, return_exceptions=True)
            with pytest.raises(WriteFailedError):
                await writer.flush()
            return futures, windows

    futures, windows = asyncio.run(main())
    deadlines = []
    for index, future in enumerate(futures):
        error = future.exception()
        assert isinstance(error, WriteFailedError), error
        low, high = windows[index // 50]
        assert error.deadline is not None and low <= error.deadline <= high, (index, error)
        assert error.deadline <= failed_at[index] <= error.deadline + 1.5, (index, error)
        deadlines.append(error.deadline)
    assert deadlines == sorted(deadlines)


def test_the_asyncio_writer_over_tls_with_ca_and_client_certificates(
    private_redis: Any, tmp_path: Path
) -> None:
    """``rediss://`` and the ``ssl_*`` redis_options, as for the threaded client: through a
    TLS endpoint requiring a client certificate; without one, a typed error."""
    certs = make_certificates(tmp_path)
    proxy = TlsProxy(certs, ("127.0.0.1", private_redis.port))
    scope = _redis_scope(private_redis.url)
    url = f"rediss://127.0.0.1:{proxy.port}/0"
    options = {
        "ssl_ca_certs": certs["ca.crt"],
        "ssl_certfile": certs["client.crt"],
        "ssl_keyfile": certs["client.key"],
    }

    async def main() -> EventPointer:
        config = ClientConfig(redis_options=options)
        async with AsyncEventStreamClientFactory.from_url(scope, url, config) as made:
            writer = await made.create_event_writer("s", UTF8StringSerializer())
            return await writer.write_event("secret", routing_key="k")

    try:
        assert asyncio.run(main()).offset == 0
        no_client_cert = ClientConfig(redis_options={"ssl_ca_certs": certs["ca.crt"]})
        assert isinstance(first_command(url, no_client_cert), ReaderGroupError)
    finally:
        proxy.close()
    assert _payloads(private_redis.url, scope) == [b"secret"]


@pytest.mark.long  # a subprocess with its own interpreter and imports
def test_the_asyncio_producer_example_verifies(redis_url: str) -> None:
    from tests.test_examples import run_example

    scope = f"s{random.Random().getrandbits(40):x}"
    out = run_example(
        "aio_producer.py", redis_url, "--requests", "60", "--events", "10", "--scope", scope
    )
    assert "exact=True in_order=True" in out and "VERIFIED" in out


def test_the_asyncio_writer_adopts_a_stream_recreated_after_redis_lost_its_data(
    private_redis: Any,
) -> None:
    """Redis loses everything (FLUSHALL); the application re-runs its idempotent set-up. A
    write made in between is retried while the stream does not exist, then lands in the
    re-created stream; later writes too."""
    with StreamManager.from_url(private_redis.url) as sm:
        sm.create_scope("x")
        sm.create_stream("x", "s", FOUR)
    expired = ClientConfig(metadata_ttl=0.0)

    def set_up_again() -> None:
        with StreamManager.from_url(private_redis.url) as manager:
            manager.create_scope("x")
            manager.create_stream("x", "s", FOUR)

    async def main() -> None:
        async with AsyncEventStreamClientFactory.from_url("x", private_redis.url, expired) as made:
            writer = await made.create_event_writer("s", UTF8StringSerializer())
            await writer.write_event("before", routing_key="k")
            redis.Redis.from_url(private_redis.url).flushall()  # the server lost its data
            during = await writer.send("during", routing_key="k")
            with pytest.raises(TimeoutError):  # retried while the stream does not exist
                await asyncio.wait_for(asyncio.shield(during.as_future()), 0.5)
            set_up_again()
            await asyncio.wait_for(during, 30)
            for i in range(20):
                await writer.send(f"after{i}", routing_key=f"k{i}")
            await writer.flush(timeout=30)

    asyncio.run(main())
    payloads = set(_payloads(private_redis.url, "x"))
    assert payloads == {b"during", *(f"after{i}".encode() for i in range(20))}


def test_closing_the_factory_closes_every_writer_though_one_flush_raises(
    aio: Any, factory: EventStreamClientFactory, connection: Connection, scope: str
) -> None:
    """The first writer's flush raises (its stream was sealed): the factory still flushes and
    closes the others (their events land), then raises that error."""
    StreamManager(connection).create_stream(scope, "other")

    async def main() -> None:
        made = aio()
        doomed = await made.create_event_writer("s", UTF8StringSerializer())
        await doomed.write_event("one")
        StreamManager(connection).seal_stream(scope, "s")
        await doomed.send("two")
        writer = await made.create_event_writer("other", UTF8StringSerializer())
        for i in range(50):
            await writer.send(f"e{i}", routing_key=f"k{i}")
        with pytest.raises(StreamSealedError):
            await made.close()
        with pytest.raises(WriterClosedError):
            await writer.send("late")

    asyncio.run(main())
    assert len(stored(factory, "other")) == 50


def test_the_state_log_source_reads_what_the_threaded_synchronizer_reads(
    connection: Connection,
    scope: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LogStreamStates (the asyncio writer's interim metadata source) pages through the
    stream's log from its snapshot: after scales and a truncation, with pages of two entries,
    it gives the state the threaded StreamManager gives; a missing stream is
    StreamNotFoundError."""
    from readergroup.aio import metadata as aio_metadata
    from readergroup.aio.metadata import LogStreamStates

    manager = StreamManager(connection)
    active = [s.segment_id for s in manager.get_stream_info(scope, "s").active_segments]
    for _ in range(3):
        info = manager.get_stream_info(scope, "s")
        first = min(info.active_segments, key=lambda segment: segment.low).segment_id
        manager.scale_stream(scope, "s", [first], _halves(info, first))
    assert len(manager.get_stream_info(scope, "s").active_segments) == len(active) + 3
    monkeypatch.setattr(aio_metadata, "READ_BATCH", 2)

    async def main() -> tuple[Any, BaseException | None]:
        view = async_view(connection, request)
        try:
            states = LogStreamStates(view)
            state = await states.fetch(scope, "s")
            try:
                await states.fetch(scope, "missing")
            except StreamNotFoundError as exc:
                return state, exc
            return state, None
        finally:
            await view.close()

    state, missing = asyncio.run(main())
    assert state == manager.stream_state(scope, "s")
    assert isinstance(missing, StreamNotFoundError) and "missing" in str(missing)
