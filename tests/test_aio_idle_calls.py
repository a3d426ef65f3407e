"""An idle asyncio reader's read calls (issue 29), on a real Redis: a call that would only wait
on the parked ``XREAD`` waits on it directly (no steps, no take, no fetch plan), yet returns
what that read brings within the call, keeps the read parked when cancelled, and sends no more
commands than the steps did. Counts, never times."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from readergroup import UTF8StringSerializer
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from readergroup.storage.connection import RedisConnection
from tests.support import fetchers
from tests.test_aio_reader import make_group, write

connection = fetchers.redis_connection  # (the fixture, under this name here)

SLOW_BEATS: dict[str, Any] = {
    "heartbeat_interval": 1.0,  # a parked XREAD holds 1 s: about ten calls of 0.1 s each
    "session_timeout": 5.0,
    "group_refresh_time": 0.1,
    "commit_mode": "manual",
}


class Counts:
    """The read calls' steps (``serve_steps``), fetches and takes of one reader."""

    def __init__(self, reader: AsyncEventStreamReader[Any]) -> None:
        self.steps = self.fetches = self.takes = 0
        session: Any = reader._session
        fetcher: Any = reader._fetcher
        serve_steps, fetch, take = session.serve_steps, session.fetch, fetcher.take

        def counted_steps(*args: Any, **kwargs: Any) -> Any:
            self.steps += 1
            return serve_steps(*args, **kwargs)

        def counted_fetch(*args: Any, **kwargs: Any) -> Any:
            self.fetches += 1
            return fetch(*args, **kwargs)

        def counted_take(*args: Any, **kwargs: Any) -> Any:
            self.takes += 1
            return take(*args, **kwargs)

        session.serve_steps, session.fetch = counted_steps, counted_fetch
        fetcher.take = counted_take


def _xreads(redis_url: str) -> int:
    """``XREAD`` commands the server has run so far."""
    client = redis.Redis.from_url(redis_url)
    try:
        stats: dict[str, Any] = client.info("commandstats")
        return int(stats.get("cmdstat_xread", {}).get("calls", 0))
    finally:
        client.close()


async def _settled(reader: AsyncEventStreamReader[str], count: int) -> None:
    """``reader`` owns ``count`` segments, its moves' rounds are over, and a read is parked."""
    async with asyncio.timeout(20):
        while len(reader.assignment()) != count:
            await reader.read_next_event(timeout=0.05)
        for _ in range(3):
            await reader.read_next_event(timeout=0.1)


def test_idle_read_calls_wait_on_the_parked_read_without_steps(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """10 idle read calls of 0.1 s under one parked ``XREAD`` (held 1 s): the steps made a fetch
    and two takes per call (10 and 20); now a call only waits on the parked read, and the steps
    run only around the parked read's end (its empty reply applied, the next one sent). No more
    ``XREAD`` than before: one per hold."""
    make_group(connection, scope, **SLOW_BEATS)

    async def main() -> tuple[Counts, int]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader = await factory.create_reader("a", "g", UTF8StringSerializer())
            await _settled(reader, 4)
            counts, xreads = Counts(reader), _xreads(redis_url)
            for _ in range(10):
                assert not (await reader.read_next_event(timeout=0.1)).is_event
            xreads = _xreads(redis_url) - xreads
            await reader.close()
            return counts, xreads

    counts, xreads = asyncio.run(main())
    # the parked read's end: the call it answers (an empty reply) applies it, and may fetch
    # again; the next sends the next read
    assert counts.steps <= 3, counts.steps
    assert counts.fetches <= 4, counts.fetches
    assert counts.takes <= 8, counts.takes
    assert xreads <= 2, xreads


def test_an_idle_call_returns_what_the_parked_read_brings(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """Events written while an idle call waits on the parked read come out of that very call
    (the reply is applied by the steps, at once)."""
    make_group(connection, scope, **SLOW_BEATS)

    async def main() -> tuple[str | None, int]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader = await factory.create_reader("a", "g", UTF8StringSerializer())
            await _settled(reader, 4)
            counts = Counts(reader)
            session: Any = reader._session
            reading = asyncio.create_task(reader.read_next_event(timeout=30))
            async with asyncio.timeout(10):
                while not session._watching:  # waiting on the parked read
                    await asyncio.sleep(0.01)
            idle_steps = counts.steps
            await asyncio.to_thread(write, connection, scope, [("k", "hello")])
            async with asyncio.timeout(10):
                event = await reading
            await reader.close()
            return event.event, idle_steps

    value, idle_steps = asyncio.run(main())
    assert value == "hello"
    assert idle_steps == 0  # it waited on the parked read without steps


def test_a_cancelled_idle_call_leaves_the_read_parked(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """An idle call cancelled while it waits on the parked read: the read stays parked (the next
    calls wait on it; no ``XREAD`` sent) and the reader reads on."""
    make_group(connection, scope, **SLOW_BEATS)

    async def main() -> tuple[int, str | None]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader = await factory.create_reader("a", "g", UTF8StringSerializer())
            await _settled(reader, 4)
            session: Any = reader._session
            xreads = _xreads(redis_url)
            reading = asyncio.create_task(reader.read_next_event(timeout=0.5))
            async with asyncio.timeout(10):
                while not session._watching:
                    await asyncio.sleep(0.01)
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
            assert not session._watching
            assert not (await reader.read_next_event(timeout=0.1)).is_event
            xreads = _xreads(redis_url) - xreads
            await asyncio.to_thread(write, connection, scope, [("k", "after")])
            async with asyncio.timeout(10):
                event = await reader.read_next_event(timeout=30)
            await reader.close()
            return xreads, event.event

    xreads, value = asyncio.run(main())
    assert xreads <= 1, xreads  # (at most the parked read's renewal, had its hold ended)
    assert value == "after"
