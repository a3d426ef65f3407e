"""The asyncio connection on ``redis+sentinel://`` follows a failover as the threaded one does
(issue 29; the threaded pools: ``statesync.redis_backend._following_pool_class``, tested in
``tests/test_ha_sentinel.py``): once any pool of a connection learns that the Sentinels name a
new primary, every connection to the old one is left, the idle ones and those in use (a
blocked ``XREAD`` there fails over at once with a connection error instead of waiting out its
block on a server that no longer receives writes; a command connection in use at the switch is
not handed out again to the old primary). Real servers and Sentinels started by the test."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis
import redis.asyncio

from readergroup import (
    AckTimeoutError,
    ClientConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.storage import aio_connection
from readergroup.storage.aio_admin import AsyncAdminConnection
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch
from readergroup.testing.embedded_redis import LocalSentinelGroup
from tests.support.waiting import wait_until
from tests.test_aio_sentinel import _create, sentinels
from tests.test_ha_offsets import named_by_all

__all__ = ["sentinels"]  # the fixture shared with test_aio_sentinel


@contextlib.asynccontextmanager
async def _with_blocking_client(
    url: str,
) -> AsyncIterator[tuple[AsyncConnection, redis.asyncio.Redis]]:
    """An asyncio connection to ``url`` and the blocking-read client its managers share,
    both closed on exit."""
    connection = AsyncConnection.from_url(url)
    admin = AsyncAdminConnection(connection)
    blocking = admin.log_backend.blocking_client
    assert isinstance(blocking, redis.asyncio.Redis)
    try:
        yield connection, blocking
    finally:
        await admin.close()
        await connection.close()


async def eventually(condition: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    """Poll ``condition`` every 20 ms until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def port_of(client: redis.asyncio.Redis) -> int:
    port: str = (await client.config_get("port"))["port"]  # type: ignore[assignment]
    return int(port)


def threaded_port_of(client: redis.Redis) -> int:
    port: str = client.config_get("port")["port"]  # type: ignore[assignment]
    return int(port)


async def blocked_on(server: redis.Redis) -> int:
    info = await asyncio.to_thread(server.info, "clients")
    return int(info["blocked_clients"])


def test_a_blocked_read_leaves_the_old_primary_once_the_command_pool_learns_of_the_switch(
    sentinels: LocalSentinelGroup,
) -> None:
    """The blocking-read client (the asyncio readers' ``XREAD BLOCK``, the synchronizers'
    waits) has a pool of its own: its read parked on the old primary fails with a connection
    error as soon as the command pool learns of the failover, and its next command goes to
    the new primary."""
    old = sentinels.primary_port()
    old_server = redis.Redis(port=old)

    async def main() -> None:
        async with _with_blocking_client(sentinels.url) as (connection, blocking):
            assert await port_of(connection.client) == old
            parked = asyncio.ensure_future(
                blocking.execute_command(  # type: ignore[no-untyped-call]
                    "XREAD", "BLOCK", 30_000, "STREAMS", "nothing", "$"
                )
            )
            await eventually(lambda: _is(blocked_on(old_server), 1), 10, "the parked read")
            promoted = await asyncio.to_thread(sentinels.failover)
            await eventually(
                lambda: _is(port_of(connection.client), promoted), 30, "the command pool"
            )
            with pytest.raises(redis.ConnectionError):
                await asyncio.wait_for(parked, 5)  # not its 30 s block
            assert await blocked_on(old_server) == 0
            assert await port_of(blocking) == promoted

    asyncio.run(main())
    old_server.close()


def test_a_command_connection_in_use_at_the_switch_does_not_go_back_to_the_old_primary(
    sentinels: LocalSentinelGroup,
) -> None:
    """A command connection taken before the failover and handed back after the pool learned
    of it is not used again on the old primary (redis-py's asyncio pool closes only the idle
    ones, and hands a returned connection out first)."""

    async def main() -> None:
        connection = AsyncConnection.from_url(sentinels.url)
        client = connection.client
        try:
            await client.ping()
            pool = client.connection_pool
            held = await pool.get_connection()  # type: ignore[no-untyped-call]
            promoted = await asyncio.to_thread(sentinels.failover)
            await eventually(lambda: _is(port_of(client), promoted), 30, "the command pool")
            await pool.release(held)
            for _ in range(3):
                assert await port_of(client) == promoted
        finally:
            await connection.close()

    asyncio.run(main())


async def _is(value: Awaitable[int], wanted: int) -> bool:
    return await value == wanted


@pytest.mark.long  # a forced failover under a reading asyncio reader: about 15 s
def test_an_asyncio_reader_and_writer_ride_out_a_sentinel_failover(
    sentinels: LocalSentinelGroup, caplog: pytest.LogCaptureFixture
) -> None:
    """An asyncio reader reading (its read parked on the primary) while the Sentinels fail
    over, and an asyncio writer writing after: the reader hands out every event, each once,
    and the connection's pools logged the switch (WARNING)."""
    _create(sentinels.url)
    with ReaderGroupManager.from_url("ha", sentinels.url) as groups:
        groups.create_reader_group("g", ReaderGroupConfig(streams=["ha/orders"]))
    config = ClientConfig(acks="replicas=1", ack_timeout=1.0)
    wanted = [f"{phase}{i}" for phase in "ab" for i in range(10)]

    async def main() -> list[str]:
        async with AsyncEventStreamClientFactory.from_url("ha", sentinels.url, config) as factory:
            writer = await factory.create_event_writer("orders", UTF8StringSerializer())
            reader = await factory.create_reader("r1", "g", UTF8StringSerializer())
            seen: list[str] = []

            async def read_all() -> None:
                deadline = time.monotonic() + 90
                while len(seen) < len(wanted) and time.monotonic() < deadline:
                    event = await reader.read_next_event(timeout=0.5)
                    if event.is_event:
                        seen.append(str(event.event))

            reading = asyncio.ensure_future(read_all())
            for i in range(10):
                await writer.write_event(f"a{i}", routing_key=f"k{i}")
            await eventually(lambda: _true(len(seen) == 10), 30, "the first events")
            await asyncio.to_thread(sentinels.failover)
            for i in range(10):  # retried onto the new primary once a replica follows it
                await asyncio.wait_for(writer.write_event(f"b{i}", routing_key=f"k{i}"), 60)
            await reading
            return seen

    caplog.set_level(logging.WARNING, logger="readergroup.storage.aio_connection")
    seen = asyncio.run(main())
    assert sorted(seen) == sorted(wanted)
    assert any("name a new primary" in r.getMessage() for r in caplog.records)


async def _true(value: bool) -> bool:
    return value


def test_an_append_falling_short_sends_the_next_command_to_the_new_primary(
    sentinels: LocalSentinelGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the promotion the old primary has no replica: an asyncio append there with
    ``acks=replicas=1`` falls short (``AckTimeoutError``), and the pool asks the Sentinels at
    the next command (not at its periodic question, turned off here), so the retry goes to the
    new primary, as the threaded connection does (``tests/test_ha_comeback.py``)."""
    monkeypatch.setattr(aio_connection, "SENTINEL_CHECK_INTERVAL", 3600.0)
    with StreamManager.from_url(sentinels.url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    config = ClientConfig(acks="replicas=1", ack_timeout=0.2)

    async def main() -> None:
        connection = AsyncConnection.from_url(sentinels.url, config)
        try:
            old = sentinels.primary.port
            assert await port_of(connection.client) == old
            promoted = await asyncio.to_thread(sentinels.failover)
            assert await port_of(connection.client) == old  # nothing asked the Sentinels yet
            batch = AppendBatch.of("ha", "s", 0, "w", 1, [(None, b"x", 0)], 1 << 20)
            with pytest.raises(AckTimeoutError, match="0 of 1 replicas"):
                await connection.segments.append([batch])
            assert await port_of(connection.client) == promoted
        finally:
            await connection.close()

    asyncio.run(main())


@pytest.mark.long  # a killed primary's failover: about 6 s per client
@pytest.mark.parametrize("flavour", ["threaded", "asyncio"])
def test_pooled_connections_to_a_killed_primary_reach_the_new_one_at_their_next_command(
    sentinels: LocalSentinelGroup, flavour: str
) -> None:
    """The primary is killed with a connection of each pool (commands, blocking reads) idle
    in it; once the Sentinels promoted a replica, the first command on each pool goes to the
    new primary without an error (the pool finds the old connection closed and asks the
    Sentinels again), the threaded and the asyncio connection alike. (Until every Sentinel
    names the new primary, redis-py's question may fail, ``MasterNotFoundError``, a
    connection error the clients retry: both alike, so the test waits for that.)"""
    old = sentinels.primary.port

    def promoted_once_all_agree() -> int:
        promoted = sentinels.failover(dead=old)
        wait_until(lambda: named_by_all(sentinels) == {promoted}, 30, "the Sentinels")
        return promoted

    if flavour == "threaded":
        connection = RedisConnection.from_url(sentinels.url)
        pools = [connection.client, connection.log_backend.blocking_client]
        assert [threaded_port_of(c) for c in pools] == [old, old]
        sentinels.primary.kill()
        promoted = promoted_once_all_agree()
        assert [threaded_port_of(c) for c in pools] == [promoted, promoted]
        connection.close()
        return

    async def main() -> None:
        async with _with_blocking_client(sentinels.url) as (connection, blocking):
            assert [await port_of(connection.client), await port_of(blocking)] == [old, old]
            sentinels.primary.kill()
            promoted = await asyncio.to_thread(promoted_once_all_agree)
            after = [await port_of(connection.client), await port_of(blocking)]
            assert after == [promoted, promoted]

    asyncio.run(main())
