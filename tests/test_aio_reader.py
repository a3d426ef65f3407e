"""The asyncio reader (issue 29): ``async for``, read calls, commits, checkpoints, listeners
(plain and coroutine), close/leave, cancellation, and mixed groups of sync and async readers,
on both backends: in memory (asyncio and threaded readers of one memory connection) and on the
suite's real Redis."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamReader
from readergroup.core.errors import (
    ReaderClosedError,
    ReaderGroupError,
    ReaderGroupNotFoundError,
    TruncatedDataError,
)
from readergroup.storage.connection_api import Connection
from tests.support.aio_backends import AsyncFactories, async_factories_of
from tests.support.connections import new_scope
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 2.0, "group_refresh_time": 0.1}


@pytest.fixture
def scope(connection: Connection) -> str:
    return new_scope(connection)


@pytest.fixture
def factories(request: pytest.FixtureRequest, connection: Connection) -> AsyncFactories:
    """Asyncio factories on the test's backend (the memory connection, or its Redis)."""
    return async_factories_of(request, connection)


def make_group(
    connection: Connection, scope: str, segments: int = 4, group: str = "g", **config: Any
) -> None:
    StreamManager(connection).create_stream(
        scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
    )
    ReaderGroupManager(scope, connection).create_reader_group(
        group, ReaderGroupConfig(streams=[f"{scope}/s"], **{**FAST, **config})
    )


def write(connection: Connection, scope: str, events: list[tuple[str, str]]) -> None:
    with EventStreamClientFactory(scope, connection) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        for key, value in events:
            writer.write_event(value, routing_key=key)
        writer.flush()


def keyed(count: int, keys: int = 8, tag: str = "") -> list[tuple[str, str]]:
    return [(f"k{n % keys}", f"{tag}k{n % keys}:{n}") for n in range(count)]


def in_key_order(values: list[str | None]) -> bool:
    last: dict[str, int] = {}
    for value in values:
        assert value is not None
        key, number = value.rsplit(":", 1)
        if last.get(key, -1) >= int(number):
            return False
        last[key] = int(number)
    return True


async def drain(
    reader: AsyncEventStreamReader[str], count: int, out: list[str | None], limit: float = 30.0
) -> None:
    """Read until ``out`` holds ``count`` values (or fail after ``limit`` s of the loop)."""
    async with asyncio.timeout(limit):
        while len(out) < count:
            event = await reader.read_next_event(timeout=0.2)
            if event.is_event:
                out.append(event.event)


def test_async_for_reads_every_event_once_in_key_order_and_commits(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    make_group(connection, scope)
    write(connection, scope, keyed(200))

    async def main() -> list[str | None]:
        got: list[str | None] = []
        async with factories(scope) as factory:
            reader = await factory.create_reader("a", "g", UTF8StringSerializer())
            async for event in reader:
                got.append(event.event)
                if len(got) == 200:
                    break
            await reader.commit()
            assert reader.assignment() == {(f"{scope}/s", n) for n in range(4)}
            committed = reader.committed()
            assert sum(committed.values()) == 200
            await reader.close()
            with pytest.raises(ReaderClosedError):
                await reader.read_next_event(timeout=0.1)
        return got

    got = asyncio.run(main())
    assert sorted(map(str, got)) == sorted(v for _, v in keyed(200))
    assert in_key_order(got)
    # a sync reader of the group starts where the async one committed and closed
    with (
        EventStreamClientFactory(scope, connection) as factory,
        factory.create_reader("b", "g", UTF8StringSerializer()) as sync_reader,
    ):
        assert not sync_reader.read_next_event(timeout=0.3).is_event


def test_read_batch_and_a_missing_group(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    make_group(connection, scope, segments=2)
    write(connection, scope, keyed(50, keys=2))

    async def main() -> list[str | None]:
        got: list[str | None] = []
        async with factories(scope) as factory:
            with pytest.raises(ReaderGroupNotFoundError):
                await factory.create_reader("a", "nope", UTF8StringSerializer())
            async with await factory.create_reader("a", "g", UTF8StringSerializer()) as reader:
                with pytest.raises(ValueError):
                    await reader.read_batch(0)
                async with asyncio.timeout(20):
                    while len(got) < 50:
                        batch = await reader.read_batch(7, timeout=0.2)
                        assert len(batch) <= 7
                        got += [e.event for e in batch if e.is_event]
        return got

    got = asyncio.run(main())
    assert sorted(map(str, got)) == sorted(v for _, v in keyed(50, keys=2)) and in_key_order(got)


def test_coroutine_and_plain_listeners_hear_moves_in_order_and_may_commit(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    make_group(connection, scope)
    heard: list[tuple[str, str, int]] = []

    class Plain:
        def on_segments_acquired(self, reader_id: str, segments: list[Any]) -> None:
            heard.append(("plain-acquired", reader_id, len(segments)))

        def on_segments_released(self, reader_id: str, segments: list[Any]) -> None:
            heard.append(("plain-released", reader_id, len(segments)))

    class Awaited:
        def __init__(self, reader: AsyncEventStreamReader[str]) -> None:
            self.reader = reader

        async def on_segments_acquired(self, reader_id: str, segments: list[Any]) -> None:
            await asyncio.sleep(0)
            heard.append(("async-acquired", reader_id, len(segments)))

        async def on_segments_released(self, reader_id: str, segments: list[Any]) -> None:
            await self.reader.commit()  # lands: the segments are still owned
            heard.append(("async-released", reader_id, len(segments)))

    async def main() -> None:
        async with factories(scope) as factory:
            a = await factory.create_reader("a", "g", UTF8StringSerializer())
            a.add_rebalance_listener(Plain())
            a.add_rebalance_listener(Awaited(a))
            async with asyncio.timeout(20):
                while len(a.assignment()) < 4:
                    await a.read_next_event(timeout=0.1)
            b = await factory.create_reader("b", "g", UTF8StringSerializer())
            async with asyncio.timeout(20):
                while not (len(a.assignment()) == len(b.assignment()) == 2):
                    await asyncio.gather(
                        a.read_next_event(timeout=0.05), b.read_next_event(timeout=0.05)
                    )
            await a.close()
            await b.close()

    asyncio.run(main())
    assert heard[:2] == [("plain-acquired", "a", 4), ("async-acquired", "a", 4)]
    assert ("plain-released", "a", 2) in heard and ("async-released", "a", 2) in heard
    released = [h for h in heard if h[0].endswith("released")]
    assert [h[0] for h in released[:2]] == ["plain-released", "async-released"]


def test_a_sync_and_an_async_reader_share_a_group_and_hand_over_exactly_once(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    """Mixed groups: a threaded and an asyncio reader balance 2/2, then the async one leaves
    and the sync one takes everything over; every event once, in key order per reader."""
    make_group(connection, scope)
    write(connection, scope, keyed(300, tag="a"))
    sync_got: list[str | None] = []
    done = threading.Event()

    with EventStreamClientFactory(scope, connection) as sync_factory:
        sync_reader = sync_factory.create_reader("sync", "g", UTF8StringSerializer())

        def read_sync() -> None:
            while not done.is_set():
                event = sync_reader.read_next_event(timeout=0.05)
                if event.is_event:
                    sync_got.append(event.event)

        thread = threading.Thread(target=read_sync)
        thread.start()

        async def main() -> list[str | None]:
            got: list[str | None] = []
            async with factories(scope) as factory:
                reader = await factory.create_reader("async", "g", UTF8StringSerializer())
                async with asyncio.timeout(30):
                    while not (
                        len(reader.assignment()) == 2 and len(sync_reader.assignment()) == 2
                    ):
                        event = await reader.read_next_event(timeout=0.05)
                        if event.is_event:
                            got.append(event.event)
                await asyncio.to_thread(write, connection, scope, keyed(300, tag="b"))
                async with asyncio.timeout(30):
                    while len(got) + len(sync_got) < 600:
                        event = await reader.read_next_event(timeout=0.05)
                        if event.is_event:
                            got.append(event.event)
                await reader.close()
            return got

        try:
            async_got = asyncio.run(main())
            write(connection, scope, keyed(100, tag="c"))
            wait_until(lambda: len(sync_got) + len(async_got) >= 700, 30, "all 700 read")
            assert len(sync_reader.assignment()) == 4
        finally:
            done.set()
            thread.join(10)
            sync_reader.close()
    every = sync_got + async_got
    assert len(every) == 700 and len(set(every)) == 700
    assert async_got and in_key_order(async_got) and in_key_order(sync_got)


def test_a_parked_read_call_is_woken_by_an_event_a_thread_writes(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    """A read call waiting for events (the loop free meanwhile) returns the one a threaded
    writer appends, before its timeout ran out."""
    make_group(connection, scope, segments=2)
    timeout = 20.0

    async def main() -> None:
        async with factories(scope) as factory:
            reader = await factory.create_reader("a", "g", UTF8StringSerializer())
            async with asyncio.timeout(timeout):
                while len(reader.assignment()) < 2:
                    await reader.read_next_event(timeout=0.05)
            loop = asyncio.get_running_loop()
            started = loop.time()
            call = asyncio.create_task(reader.read_next_event(timeout=timeout))
            for _ in range(5):
                await asyncio.sleep(0.001)  # (the loop runs other tasks while the call waits)
            assert not call.done()
            await asyncio.to_thread(write, connection, scope, [("k1", "k1:0")])
            event = await call
            assert event.event == "k1:0"
            assert loop.time() - started < timeout  # woken by the append, not timed out
            await reader.close()

    asyncio.run(main())


def test_truncation_under_an_asyncio_reader_is_reported_once_then_the_rest_comes_in_order(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    """Events truncated away under a reader: one :class:`TruncatedDataError` naming the head,
    then every event that still exists, in order (the threaded reader's behaviour, on both
    backends)."""
    make_group(connection, scope, segments=1)
    write(connection, scope, [("k", f"e{n}") for n in range(200)])
    results: list[Any] = []

    async def read_until(reader: AsyncEventStreamReader[str], done: Any) -> None:
        async with asyncio.timeout(30):
            while not done():
                try:
                    batch = await reader.read_batch(100, timeout=0.05)
                except ReaderGroupError as exc:
                    results.append(exc)
                    continue
                results.extend(e.event for e in batch)

    async def main() -> None:
        async with factories(scope) as factory:
            config = ReaderConfig(read_batch=20, max_buffered_events=20)
            reader = await factory.create_reader("r", "g", UTF8StringSerializer(), config)
            await read_until(reader, lambda: len(results) >= 20)
            cut = StreamCut(scope, "s", {0: 100})
            await asyncio.to_thread(StreamManager(connection).truncate_stream, scope, "s", cut)
            await read_until(reader, lambda: results and results[-1] == "e199")
            await reader.close()

    asyncio.run(main())
    errors = [r for r in results if isinstance(r, Exception)]
    values = [r for r in results if not isinstance(r, Exception)]
    assert len(errors) == 1 and isinstance(errors[0], TruncatedDataError)
    assert "below the head 100" in str(errors[0])
    before = [v for v in values if int(v[1:]) < 100]
    assert before == [f"e{n}" for n in range(len(before))]
    assert [v for v in values if int(v[1:]) >= 100] == [f"e{n}" for n in range(100, 200)]


async def _cancelled_reads(
    factories: AsyncFactories, scope: str, cancellations: int, seed: int
) -> list[str | None]:
    """Read while an asyncio writer writes, cancelling read tasks at random moments until
    ``cancellations`` reads were cancelled while under way; every value read, in order."""
    rng = random.Random(seed)
    got: list[str | None] = []
    async with factories(scope) as factory:
        writer = await factory.create_event_writer("s", UTF8StringSerializer())
        reader = await factory.create_reader("a", "g", UTF8StringSerializer())
        total = 3000

        async def write_all() -> None:
            for key, value in keyed(total):
                await writer.send(value, routing_key=key)
                if rng.random() < 0.05:
                    await asyncio.sleep(0.001)
            await writer.flush()

        writing = asyncio.create_task(write_all())
        cancelled = 0
        async with asyncio.timeout(60):
            while cancelled < cancellations or len(got) < total:
                task = asyncio.create_task(reader.read_next_event(timeout=0.05))
                if cancelled < cancellations:
                    for _ in range(rng.randrange(4)):
                        await asyncio.sleep(0)  # cancelled at any await of the read
                    if rng.random() < 0.3:
                        await asyncio.sleep(rng.random() * 0.003)
                    if not task.done():
                        task.cancel()
                        cancelled += 1
                try:
                    event = await task
                except asyncio.CancelledError:
                    continue
                if event.is_event:
                    got.append(event.event)
        await writing
        await reader.close()
    return got


@pytest.mark.parametrize("cancellations", [150])
def test_cancelled_reads_lose_nothing_and_leave_the_reader_usable(
    connection: Connection, scope: str, factories: AsyncFactories, cancellations: int
) -> None:
    make_group(connection, scope, segments=2)
    got = asyncio.run(_cancelled_reads(factories, scope, cancellations, seed=cancellations))
    assert len(got) == len(set(got)) == 3000
    assert in_key_order(got)


@pytest.mark.long
def test_a_thousand_cancelled_reads_lose_nothing(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    make_group(connection, scope, segments=2)
    got = asyncio.run(_cancelled_reads(factories, scope, 1000, seed=1000))
    assert len(got) == len(set(got)) == 3000
    assert in_key_order(got)


def test_cancelling_the_service_closes_the_reader_and_gives_its_segments_back(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    """A service task cancelled in ``async for`` leaves ``async with`` (close: the group is
    left, heartbeat and maintenance tasks end); another reader takes every segment at once."""
    make_group(connection, scope, session_timeout=30.0)
    write(connection, scope, keyed(40))

    async def main() -> None:
        async with factories(scope) as factory:
            started = asyncio.Event()

            async def service() -> None:
                async with await factory.create_reader("a", "g", UTF8StringSerializer()) as r:
                    async for _ in r:
                        started.set()

            task = asyncio.create_task(service())
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            others = [t for t in asyncio.all_tasks() if t.get_name().startswith("rg-")]
            assert not [t for t in others if not t.done()]
            b = await factory.create_reader("b", "g", UTF8StringSerializer())
            async with asyncio.timeout(10):  # well within the 30 s session: a leave, not expiry
                while len(b.assignment()) < 4:
                    await b.read_next_event(timeout=0.05)

    asyncio.run(main())


@pytest.mark.long
@pytest.mark.parametrize("connection", ["redis"], indirect=True)  # (Redis's connection pools)
def test_hundreds_of_readers_of_one_loop_join_at_once(
    connection: Connection, scope: str, factories: AsyncFactories
) -> None:
    """150 asyncio readers of one factory joining concurrently: their commands queue for the
    factory's connections instead of failing with "Too many connections" (redis-py's pool
    holds 100 by default), and they balance."""
    make_group(connection, scope, segments=150, heartbeat_interval=1.0, session_timeout=10.0)

    async def main() -> None:
        async with factories(scope) as factory:
            readers = await asyncio.gather(
                *(factory.create_reader(f"r{n}", "g", UTF8StringSerializer()) for n in range(150))
            )
            async with asyncio.timeout(30):
                while sum(len(r.assignment()) for r in readers) < 150 or any(
                    len(r.assignment()) != 1 for r in readers
                ):
                    await asyncio.gather(*(r.read_next_event(timeout=0.05) for r in readers))

    asyncio.run(main())
