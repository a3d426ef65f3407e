"""Cancelling a task blocked in an async read loses nothing: random cancellations of reads of
the asyncio fetcher, at every await point it has (a blocking ``XREAD`` cancelled mid-wait, a
parked read, a read ahead awaited, a segment's log checked), while a writer appends
concurrently; every event comes exactly once, in order per segment, and the connection pool is
left with no connection in use."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest
import redis

from readergroup import ReaderConfig, ScalingPolicy, StreamConfiguration, StreamManager
from readergroup.client.aio_fetcher import AsyncFetcher
from readergroup.client.fetch_core import Outage, OwnedSegment
from readergroup.client.serializers import UTF8StringSerializer
from readergroup.storage.aio_reads import AsyncSegmentReads
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch
from statesync.system_clock import SYSTEM_CLOCK
from tests.support import fetchers
from tests.support.fetchers import async_client, next_event

connection = fetchers.redis_connection  # (the fixture, under this name here)

SEGMENTS = 3
QUIET = 20.0
"""Seconds the random-cancellation test waits for the next event once it cancels no more
reads, before it stops and reports what it is missing."""


def write_concurrently(
    connection: RedisConnection, scope: str, per_segment: int, rng: random.Random
) -> threading.Thread:
    """A writer thread appending ``per_segment`` events to each segment in small batches of
    random sizes (payload ``"<segment>:<n>"``)."""

    def run() -> None:
        written = dict.fromkeys(range(SEGMENTS), 0)
        sequence = 0
        while any(n < per_segment for n in written.values()):
            segment = rng.choice([s for s, n in written.items() if n < per_segment])
            size = min(rng.randint(1, 40), per_segment - written[segment])
            events = [(None, f"{segment}:{written[segment] + i}".encode(), 0) for i in range(size)]
            sequence += 1
            batch = AppendBatch.of(scope, "s", segment, "w", sequence, events, 1 << 20)
            (reply,) = connection.segments.append([batch])
            assert reply.error is None, reply.error
            written[segment] += size

    thread = threading.Thread(target=run, name="writer", daemon=True)
    thread.start()
    return thread


def fetcher_on(
    url: str, connection: RedisConnection, scope: str, segments: int = 1, **config: Any
) -> tuple[Any, AsyncFetcher[str]]:
    """A ``redis.asyncio`` client and an asyncio fetcher owning ``segments`` of stream ``s``."""
    client = async_client(url)
    reads = AsyncSegmentReads(client, connection.keys)
    fetcher = AsyncFetcher(
        reads, UTF8StringSerializer(), ReaderConfig(**config), Outage("t", 10.0), SYSTEM_CLOCK
    )
    for number in range(segments):
        data_key = connection.keys.segment(scope, "s", number).events
        fetcher.add(OwnedSegment.at((f"{scope}/s", number), scope, "s", data_key, 1, 0))
    return client, fetcher


@pytest.mark.parametrize("cancellations", [pytest.param(1000, marks=pytest.mark.long), 150])
def test_random_cancellations_of_async_reads_lose_and_repeat_nothing(
    redis_url: str, scope: str, connection: RedisConnection, cancellations: int
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        policy = ScalingPolicy.fixed(SEGMENTS)
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=policy))
    per_segment = cancellations * 3
    rng = random.Random(29)
    stats: dict[str, Any] = {}

    async def main() -> dict[int, list[int]]:
        client, fetcher = fetcher_on(
            redis_url,
            connection,
            scope,
            SEGMENTS,
            read_batch=16,
            max_buffered_events=64,
            prefetch_events=96,
        )
        writer = write_concurrently(connection, scope, per_segment, random.Random(7))
        got: dict[int, list[int]] = {n: [] for n in range(SEGMENTS)}
        cancelled = completed = 0
        total = per_segment * SEGMENTS
        while cancelled < cancellations or completed < total:
            # a plain XREAD BLOCK awaited directly, or one parked across calls, at random
            block, hold = rng.choice(((0.02, 0.0), (0.06, 0.5)))
            task = asyncio.ensure_future(next_event(fetcher, block, hold))
            if cancelled < cancellations:
                await asyncio.wait((task,), timeout=rng.choice((0, 0, 0.0005, 0.002, 0.01)))
                task.cancel()
            elif not (await asyncio.wait((task,), timeout=QUIET))[0]:
                task.cancel()  # an event lost: the assertions below name it (rather than hang)
                await asyncio.wait((task,))
                break
            await asyncio.wait((task,))
            if task.cancelled():
                cancelled += 1
                continue
            event = task.result()
            value = event.event
            assert value is not None
            segment, number = map(int, value.split(":"))
            assert (segment, event.offset) == (event.segment, number)
            got[segment].append(number)
            completed += 1
        writer.join(30)
        await fetcher.aclose()
        stats["in_use"] = len(client.connection_pool._in_use_connections)
        stats["ping"] = await client.ping()
        await client.aclose()
        return got

    got = asyncio.run(main())
    assert stats == {"in_use": 0, "ping": True}
    for segment in range(SEGMENTS):
        assert got[segment] == list(range(per_segment)), segment  # exactly once, in order
    assert redis.Redis.from_url(redis_url).ping()


@pytest.mark.parametrize("parser", ["hiredis", "python"])
def test_a_blocking_xread_cancelled_mid_wait_leaves_no_reply_on_a_pooled_connection(
    redis_url: str, scope: str, connection: RedisConnection, parser: str
) -> None:
    """One pooled connection only: the reply the server sends the cancelled ``XREAD BLOCK``
    when an event arrives must not be read as the answer to the next command."""
    from redis._parsers import _AsyncHiredisParser, _AsyncRESP3Parser
    from redis.asyncio import ConnectionPool

    key = f"{scope}:a-stream"
    seen: dict[str, Any] = {}

    async def main() -> None:
        parser_class = _AsyncHiredisParser if parser == "hiredis" else _AsyncRESP3Parser
        pool = ConnectionPool.from_url(
            redis_url, max_connections=1, socket_timeout=15, parser_class=parser_class
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        reads = AsyncSegmentReads(client, connection.keys)
        await client.xadd(key, {"n": "0"}, id="1-0")
        for round_ in range(3):
            blocked = asyncio.ensure_future(reads.read_keys({key: f"{round_ + 1}-0"}, 2.0, 10))
            await asyncio.wait((blocked,), timeout=0.1)  # (parked on the server by now)
            blocked.cancel()
            await asyncio.wait((blocked,))
            connection.client.xadd(key, {"n": str(round_ + 1)}, id=f"{round_ + 2}-0")
            seen[f"in use {round_}"] = len(pool._in_use_connections)
            seen[f"get {round_}"] = await client.get(f"{scope}:nothing")
            seen[f"read {round_}"] = list(await reads.read_keys({key: f"{round_ + 1}-0"}, 0.1, 10))
        await client.aclose()

    asyncio.run(main())
    for round_ in range(3):
        assert seen[f"in use {round_}"] == 0
        assert seen[f"get {round_}"] is None  # not the cancelled XREAD's reply
        assert seen[f"read {round_}"] == [key]


def test_a_parked_read_survives_the_cancelled_call_and_answers_the_next(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    seen: dict[str, Any] = {}

    async def main() -> None:
        client, fetcher = fetcher_on(redis_url, connection, scope)
        call = asyncio.ensure_future(fetcher.fetch(1.0, {}, hold=4.0))
        while not fetcher._running:  # (the XREAD BLOCK is sent, its reply awaited)
            await asyncio.sleep(0.01)
        (sent,) = fetcher._running
        call.cancel()
        await asyncio.wait((call,))
        seen["cancelled"] = call.cancelled()
        parked = fetcher._parked
        seen["still parked"] = parked is not None and parked.task is sent and not sent.done()
        batch = AppendBatch.of(scope, "s", 0, "w", 1, [(None, b"late", 0)], 1 << 20)
        connection.segments.append([batch])
        await fetcher.fetch(1.0, {}, hold=4.0)
        seen["answered the next call"] = sent.done() and fetcher._parked is None
        seen["events"] = [e.event for e in fetcher.take(10)]
        await fetcher.aclose()
        await client.aclose()

    asyncio.run(main())
    assert seen == {
        "cancelled": True,
        "still parked": True,
        "answered the next call": True,
        "events": ["late"],
    }


def test_the_fetcher_lets_go_of_the_readers_gate_only_while_it_waits_for_redis(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """Another task of the reader (its group maintenance) gets the gate while a fetch waits in
    an ``XREAD BLOCK``; the fetch has it back when it returns."""
    from contextlib import asynccontextmanager

    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    seen: list[str] = []

    async def main() -> None:
        client, fetcher = fetcher_on(redis_url, connection, scope)
        gate = asyncio.Lock()

        @asynccontextmanager
        async def released() -> Any:
            gate.release()
            try:
                yield
            finally:
                await gate.acquire()

        fetcher.unlocked = released

        async def read() -> None:
            async with gate:
                await fetcher.fetch(0.5, {})
                seen.append(f"fetched, gate held: {gate.locked()}")

        async def maintain() -> None:
            await asyncio.sleep(0.05)
            async with gate:
                seen.append("maintenance had the gate")

        await asyncio.gather(read(), maintain())
        await fetcher.aclose()
        await client.aclose()

    asyncio.run(main())
    assert seen == ["maintenance had the gate", "fetched, gate held: True"]
