"""Both drivers of the fetch core behind one synchronous face, for one read-path suite: the
threaded :class:`~readergroup.client.fetcher.Fetcher` and the asyncio
:class:`~readergroup.client.aio_fetcher.AsyncFetcher` (run on an event loop of its own, on a
``redis.asyncio`` client of its own)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from readergroup.client.aio_fetcher import AsyncFetcher
from readergroup.client.event_read import EventRead
from readergroup.client.fetch_core import FetchCore, FetchOutcome, Outage, OwnedSegment
from readergroup.client.fetcher import Fetcher
from readergroup.client.serializers import Serializer, UTF8StringSerializer
from readergroup.core.errors import ReaderGroupError
from readergroup.core.group_config import ReaderConfig
from readergroup.storage.aio_reads import AsyncSegmentReads
from readergroup.storage.connection import RedisConnection
from readergroup.storage.multi_read import MAX_BLOCK_SECONDS
from statesync.system_clock import SYSTEM_CLOCK

KINDS = ("sync", "async")


@pytest.fixture
def redis_connection(redis_url: str) -> Iterator[RedisConnection]:
    """A readergroup connection to the test's server."""
    connection = RedisConnection.from_url(redis_url)
    try:
        yield connection
    finally:
        connection.close()


T = TypeVar("T")


def async_client(url: str) -> redis.asyncio.Redis:
    """A ``redis.asyncio`` client as readergroup's: bytes, no retries of its own."""
    return redis.asyncio.Redis.from_url(
        url, retry=Retry(NoBackoff(), 0), socket_timeout=MAX_BLOCK_SECONDS + 5
    )


class Driven:
    """A fetcher of ``kind`` (``sync`` or ``async``) on ``connection``'s server."""

    def __init__(
        self,
        kind: str,
        connection: RedisConnection,
        url: str,
        config: ReaderConfig | None = None,
        serializer: Serializer[Any] | None = None,
    ) -> None:
        self.kind = kind
        config = config or ReaderConfig()
        serializer = serializer or UTF8StringSerializer()
        outage = Outage("t", 10.0)
        self.loop: asyncio.AbstractEventLoop | None = None
        if kind == "sync":
            clock = SYSTEM_CLOCK
            self.core: FetchCore[Any] = Fetcher(connection, serializer, config, outage, clock)
            return
        self.loop = asyncio.new_event_loop()
        self.client = async_client(url)
        self.reads = AsyncSegmentReads(self.client, connection.keys)
        self.core = AsyncFetcher(self.reads, serializer, config, outage, SYSTEM_CLOCK)

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        assert self.loop is not None
        return self.loop.run_until_complete(make())

    def fetch(
        self, block: float = 0.05, logs: dict[str, str] | None = None, hold: float = 0.0
    ) -> FetchOutcome:
        core = self.core
        if isinstance(core, Fetcher):
            return core.fetch(block, logs or {}, hold=hold)
        assert isinstance(core, AsyncFetcher)
        return self.run(lambda: core.fetch(block, logs or {}, hold=hold))

    def take(self, max_events: int) -> list[EventRead[Any]]:
        core = self.core
        if isinstance(core, Fetcher):
            return core.take(max_events, refill=True)
        assert isinstance(core, AsyncFetcher)
        return self.run(lambda: core.take_refilled(max_events))

    def collect(self, timeout: float) -> bool:
        core = self.core
        if isinstance(core, Fetcher):
            return core.collect(timeout)
        assert isinstance(core, AsyncFetcher)
        return self.run(lambda: core.collect(timeout))

    def add(self, connection: RedisConnection, scope: str, number: int, at: int = 0) -> Any:
        data_key = connection.keys.segment(scope, "s", number).events
        owned = OwnedSegment.at((f"{scope}/s", number), scope, "s", data_key, 1, at)
        self.core.add(owned)
        return owned

    def results(self, until: Callable[[list[Any]], bool], rounds: int = 400) -> list[Any]:
        """Values and typed errors, in the order a reader's read calls would return them,
        until ``until(results)``."""
        got: list[Any] = []
        for _ in range(rounds):
            try:
                if self.core.errors:
                    raise self.core.errors.popleft()
                events = self.take(100)
                if not events:
                    self.fetch()
                got += [e.event for e in events]
            except ReaderGroupError as exc:
                got.append(exc)
            if until(got):
                return got
        raise AssertionError(f"not reached after {rounds} rounds: {got[-5:]!r}")

    def close(self) -> None:
        core = self.core
        if isinstance(core, AsyncFetcher):
            self.run(core.aclose)
            self.run(self.client.aclose)
            assert self.loop is not None
            self.loop.close()
        else:
            core.close()


async def next_event(
    fetcher: AsyncFetcher[T], block: float = 0.05, hold: float = 0.5
) -> EventRead[T]:
    """The next event of the asyncio fetcher (errors raised), as an async reader's per-event
    read gets it: the fast path (a turn of the loop when due, taken before an event leaves its
    buffer, so a cancellation there loses none), else what a read ahead brought,
    else a fetch (``hold`` longer than ``block``: parked across calls; else a plain XREAD
    BLOCK awaited directly)."""
    while True:
        if fetcher.turn_due():  # (before an event is taken: a cancellation here loses none)
            await fetcher.take_turn()
        event = fetcher.take_one()
        if event is not None:
            return event
        if fetcher.errors:
            raise fetcher.errors.popleft()
        taken = await fetcher.take_refilled(1)
        if taken:
            return taken[0]
        await fetcher.fetch(block, {}, hold=hold)
