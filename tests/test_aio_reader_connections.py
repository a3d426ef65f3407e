"""The asyncio reader's backend side on both backends (:class:`~readergroup.storage.
aio_reader_connection.AsyncReaderConnection`: the memory connection's and Redis's): the same
replies to the same reads, blocking reads that never block the loop and are woken by an append
or a state log entry made in another thread, and reads started ahead that outlive a cancelled
caller."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.aio.admin_connection import admin_connection_of, reader_connection_of
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES
from readergroup.core.names import group_sync_name
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_reader_connection import AsyncReaderConnection
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection
from readergroup.storage.multi_read import MAX_BLOCK_SECONDS
from readergroup.storage.segment_records import parse_event
from readergroup.testing.aio_memory import AsyncMemoryConnection
from readergroup.testing.memory_connection import MemoryConnection
from tests.support.connections import new_scope


@pytest.fixture
def scope(connection: Connection) -> str:
    """A fresh scope with a stream ``s`` of one segment and a reader group ``g`` of it."""
    name = new_scope(connection)
    StreamManager(connection).create_stream(
        name, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1))
    )
    ReaderGroupManager(name, connection).create_reader_group(
        "g", ReaderGroupConfig(streams=[f"{name}/s"])
    )
    return name


@pytest.fixture
def url(request: pytest.FixtureRequest, connection: Connection) -> str | None:
    return (
        None if isinstance(connection, MemoryConnection) else request.getfixturevalue("redis_url")
    )


@asynccontextmanager
async def reader_side(
    connection: Connection, url: str | None
) -> AsyncIterator[AsyncReaderConnection]:
    """The asyncio reader side of ``connection``'s backend (closed on leaving)."""
    made = (
        AsyncMemoryConnection(connection)
        if isinstance(connection, MemoryConnection)
        else AsyncConnection.from_url(str(url))
    )
    admin = admin_connection_of(made)
    side = reader_connection_of(made, admin)
    try:
        yield side
    finally:
        await side.close()
        await admin.close()
        await made.close()


def write(connection: Connection, scope: str, values: list[str]) -> None:
    with EventStreamClientFactory(scope, connection) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        for value in values:
            writer.write_event(value, routing_key="k")
        writer.flush()


def payloads(entries: Any) -> list[bytes]:
    return [parse_event(0, entry).payload for entry in entries]


async def ticking(ticks: list[int]) -> None:
    """Count turns of the loop (a blocked loop counts none)."""
    while True:
        await asyncio.sleep(0.001)
        ticks[0] += 1


def test_the_reads_answer_alike_on_both_backends(
    connection: Connection, scope: str, url: str | None
) -> None:
    write(connection, scope, [f"e{n}" for n in range(5)])
    events = connection.keys.segment(scope, "s", 0).events
    missing = connection.keys.segment(scope, "s", 9).events

    async def main() -> None:
        async with reader_side(connection, url) as side:
            reads = side.reads
            found = await reads.read_keys({events: "0-0", missing: "0-0"}, 0.01, 3)
            assert list(found) == [events]
            assert payloads(found[events]) == [b"e0", b"e1", b"e2"]
            last = found[events][-1][0]  # (the id of e2: "3-<epoch>")
            after = await reads.xread({events: last.decode()}, 10)
            assert payloads(after[events]) == [b"e3", b"e4"]
            assert await reads.xread({events: after[events][-1][0].decode()}, 10) == {}
            assert payloads(await reads.read_raw(scope, "s", 0, 1, 3, 10)) == [b"e1", b"e2"]
            assert payloads(await reads.read_raw(scope, "s", 9, 0, -1, 10)) == []
            states = await reads.segment_states(scope, "s", [0, 9])
            assert (states[0].exists, states[0].tail, states[9].exists) == (True, 5, False)
            assert (await reads.epoch_histories(scope, "s", [0, 9]))[0][0] == 5
            assert not await reads.lost_in_failover(scope, "s", 0, 0, 5)
            assert await reads.read_keys({}, 1.0, 10) == {}

    asyncio.run(main())


def test_a_blocking_read_is_woken_by_an_append_from_another_thread(
    connection: Connection, scope: str, url: str | None
) -> None:
    """The read waits without blocking the loop (other tasks run meanwhile), and returns the
    event a threaded writer appends, before its block ran out."""
    events = connection.keys.segment(scope, "s", 0).events

    async def main() -> None:
        async with reader_side(connection, url) as side:
            loop = asyncio.get_running_loop()
            ticks = [0]
            ticker = asyncio.create_task(ticking(ticks))
            started = loop.time()
            read = asyncio.create_task(side.reads.read_keys({events: "0-0"}, MAX_BLOCK_SECONDS, 10))
            while ticks[0] < 5:
                await asyncio.sleep(0.001)
            assert not read.done()
            before = ticks[0]
            await asyncio.to_thread(write, connection, scope, ["late"])
            found = await read
            assert loop.time() - started < MAX_BLOCK_SECONDS  # woken, not timed out
            assert payloads(found[events]) == [b"late"]
            assert ticks[0] > before  # the loop ran its other tasks all along
            ticker.cancel()

    asyncio.run(main())


def test_a_blocking_read_of_a_state_log_is_woken_by_an_entry_from_another_thread(
    connection: Connection, scope: str, url: str | None
) -> None:
    """A read of a group's log (its wake-up key) returns when a threaded reader joins."""

    async def main() -> None:
        async with reader_side(connection, url) as side:
            loop = asyncio.get_running_loop()
            name = group_sync_name(scope, "g")
            sync = side.synchronizer(name, UPDATE_TYPES, STATE_TYPES)
            await sync.follow()
            key, after = side.wake_on(name, sync.revision, wakes_only=False)
            started = loop.time()
            read = asyncio.create_task(side.reads.read_keys({key: after}, MAX_BLOCK_SECONDS, 10))
            for _ in range(3):
                await asyncio.sleep(0.001)
            assert not read.done()

            def join() -> None:
                with EventStreamClientFactory(scope, connection) as factory:
                    factory.create_reader("t", "g", UTF8StringSerializer()).close()

            await asyncio.to_thread(join)
            assert key in await read
            assert loop.time() - started < MAX_BLOCK_SECONDS

    asyncio.run(main())


def test_a_started_read_outlives_a_cancelled_caller(
    connection: Connection, scope: str, url: str | None
) -> None:
    events = connection.keys.segment(scope, "s", 0).events

    async def main() -> None:
        async with reader_side(connection, url) as side:
            pending = side.reads.start({events: "0-0"}, 10, MAX_BLOCK_SECONDS)
            caller = asyncio.create_task(pending.result(MAX_BLOCK_SECONDS))
            for _ in range(3):
                await asyncio.sleep(0.001)
            caller.cancel()
            with pytest.raises(asyncio.CancelledError):
                await caller
            assert not pending.task.done()
            await asyncio.to_thread(write, connection, scope, ["after"])
            found = await pending.result(MAX_BLOCK_SECONDS)
            assert found is not None and payloads(found[events]) == [b"after"]
            pending.cancel()
            gone = side.reads.start({events: "1-0"}, 10, MAX_BLOCK_SECONDS)
            gone.cancel()  # given up: its task ends, its reply is never taken
            await asyncio.wait([gone.task])
            assert gone.task.cancelled()

    asyncio.run(main())


@pytest.mark.parametrize("connection", ["redis"], indirect=True)
def test_a_closed_factory_leaves_no_connection_open(
    connection: Connection, scope: str, url: str | None
) -> None:
    """Managers and readers of one asyncio factory share one client of blocking waits, and
    closing the factory disconnects every socket it opened (the blocking pool's too)."""
    redis = RedisConnection.from_url(str(url)).client

    def ids() -> list[int]:
        return [int(client["id"]) for client in redis.client_list()]

    newest = max(ids())  # (this probe's own connection among them)

    def opened_since() -> int:
        """Connections opened since the test began and still open (connections of earlier
        tests on this server may close meanwhile: counting all of them failed in CI)."""
        return sum(1 for client in ids() if client > newest)

    async def main() -> None:
        async with AsyncEventStreamClientFactory.from_url(scope, str(url)) as factory:
            reader = await factory.create_reader("a", "g", UTF8StringSerializer())
            await reader.read_next_event(timeout=0.2)
            assert opened_since() > 0
        await asyncio.sleep(0)

    asyncio.run(main())
    assert opened_since() == 0
    redis.close()
