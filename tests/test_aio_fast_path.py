"""The asyncio reader's per-event path (issue 29, speed): ``async for``'s iterator runs the fast
path itself and outlives a cancelled step; a read ahead's reply is made events
(:func:`~readergroup.storage.segment_records.stored_events`) as soon as it arrives, so its lists
die young; events come once, in order, either way."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from readergroup import (
    ReaderConfig,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.client import aio_fetcher
from readergroup.client.event_read import EventRead
from readergroup.storage.aio_reads import AsyncPendingRead
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import AppendBatch, StoredEvents, stored_events
from tests.support import fetchers
from tests.support.fetchers import Driven
from tests.test_aio_reader import in_key_order, keyed, make_group, write

connection = fetchers.redis_connection  # (the fixture, under this name here)


def test_an_async_for_iterator_goes_on_after_cancelled_steps_losing_nothing(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """Steps of ONE ``async for`` iterator (``__anext__``) cancelled at random moments, fast
    path and slow path alike: the same iterator's next step hands out the next event (an
    async generator would be finished by the first cancellation); every event once, in
    order per key."""
    make_group(connection, scope, segments=2)
    total = 2000
    write(connection, scope, keyed(total))
    rng = random.Random(29)

    async def main() -> list[str | None]:
        got: list[str | None] = []
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader = await factory.create_reader("a", "g", UTF8StringSerializer())
            events = aiter(reader)

            async def step() -> EventRead[str]:
                return await anext(events)

            cancelled = 0
            async with asyncio.timeout(60):
                while len(got) < total:
                    task = asyncio.create_task(step())
                    for _ in range(rng.randrange(3)):
                        await asyncio.sleep(0)
                    if cancelled < 200 and rng.random() < 0.5 and not task.done():
                        cancelled += task.cancel()
                    (outcome,) = await asyncio.gather(task, return_exceptions=True)
                    if isinstance(outcome, BaseException):
                        assert isinstance(outcome, asyncio.CancelledError), outcome
                    else:
                        got.append(outcome.event)
            assert cancelled > 50
            await reader.close()
        return got

    got = asyncio.run(main())
    assert len(got) == len(set(got)) == total
    assert in_key_order(got)


def test_a_read_ahead_reply_is_made_events_when_it_arrives(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """The reply of a read ahead holds flat events (not the ``[id, [field, value, ...]]``
    lists Redis sent) once its task is done, before the fetcher applies it; applying it
    buffers every event once, in order."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    events = [(None, f"e{n}".encode(), 0) for n in range(300)]
    (reply,) = connection.segments.append([AppendBatch.of(scope, "s", 0, "w", 1, events, 1 << 20)])
    assert reply.error is None
    driven = Driven("async", connection, redis_url, ReaderConfig(read_batch=100))
    try:
        core = driven.core
        assert isinstance(core, aio_fetcher.AsyncFetcher)
        driven.add(connection, scope, 0)
        driven.fetch()  # a full batch: the segment is behind, reads ahead follow
        driven.run(core.read_ahead)
        ahead = core._ahead[0].read
        assert isinstance(ahead, AsyncPendingRead)
        driven.run(lambda: ahead.ready(5.0))
        driven.run(lambda: asyncio.sleep(0))  # (the task's done callbacks)
        (entries,) = ahead.task.result().values()
        assert type(entries) is StoredEvents
        assert all(type(entry) is tuple for entry in entries)
        got = driven.results(lambda got: len(got) >= 300)
        assert got == [f"e{n}" for n in range(300)]
    finally:
        driven.close()


def test_a_read_ahead_entry_that_does_not_parse_is_left_for_applying_to_report() -> None:
    """An entry ``stored_events`` cannot read (not ``[id, fields]``) leaves that key's raw
    entries as they came (applying them raises, as it did before), the other keys flat."""
    good = [[b"1-0", [b"p", b"x", b"w", b"0", b"t", b"0", b"b", b"0"]]]
    bad = [[b"1-0"]]

    async def main() -> dict[str, Any]:
        async def reply() -> dict[str, Any]:
            return {"good": good, "bad": bad}

        task = asyncio.ensure_future(reply())
        task.add_done_callback(aio_fetcher._flatten)
        await task
        await asyncio.sleep(0)
        result: dict[str, Any] = task.result()
        return result

    result = asyncio.run(main())
    assert result["bad"] is bad
    assert result["good"] == stored_events(good)
    assert type(result["good"]) is StoredEvents
