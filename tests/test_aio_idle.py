"""Idle asyncio readers (issue 29), on a real Redis: an idle reader's group maintenance makes no
round that would find nothing to do (its periodic look is a callback of the loop, not a round),
yet still acts within ``group_refresh_time`` on what concerns it, whether its application
reads or not. Counts, never times."""

from __future__ import annotations

import asyncio
from typing import Any

from readergroup import UTF8StringSerializer
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from readergroup.storage.connection import RedisConnection
from tests.support import fetchers
from tests.test_aio_reader import make_group

connection = fetchers.redis_connection  # (the fixture, under this name here)

REFRESH: dict[str, Any] = {"group_refresh_time": 0.05}


def _count_rounds(reader: AsyncEventStreamReader[Any]) -> list[int]:
    """Count the maintenance rounds of ``reader`` (one per ``maintain_steps``)."""
    session: Any = reader._session
    rounds = [0]
    steps = session.maintain_steps

    def counted() -> Any:
        rounds[0] += 1
        return steps()

    session.maintain_steps = counted
    return rounds


async def _own(reader: AsyncEventStreamReader[str], count: int) -> None:
    async with asyncio.timeout(20):
        while len(reader.assignment()) != count:
            await reader.read_next_event(timeout=0.05)


async def idle_rounds(redis_url: str, scope: str) -> int:
    """The maintenance rounds of reader ``a`` of group ``g`` (4 segments, nothing written) over
    20 read calls of 0.1 s, once it owns every segment and its moves' rounds are over."""
    async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
        reader = await factory.create_reader("a", "g", UTF8StringSerializer())
        await _own(reader, 4)
        for _ in range(5):  # settled: the moves' rounds are over
            await reader.read_next_event(timeout=0.1)
        rounds = _count_rounds(reader)
        for _ in range(20):
            assert not (await reader.read_next_event(timeout=0.1)).is_event
        await reader.close()
        return rounds[0]


def test_an_idle_reader_makes_no_maintenance_round_that_would_do_nothing(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """20 read calls of an idle reader, each waiting twice ``group_refresh_time`` (0.05 s): the
    old maintenance made a round per ``group_refresh_time`` (about 40), now it makes none."""
    make_group(connection, scope, **REFRESH, commit_mode="manual")
    assert asyncio.run(idle_rounds(redis_url, scope)) <= 5


def test_a_reader_not_reading_still_releases_to_a_newcomer(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """Its application holds no read call open: no fetch watches the group, so its periodic
    look finds the group unwatched and a round reads the group log and releases (no listener:
    nothing of the segments is with the application)."""
    make_group(connection, scope, **REFRESH)

    async def main() -> tuple[int, int]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            a = await factory.create_reader("a", "g", UTF8StringSerializer())
            await _own(a, 4)
            b = await factory.create_reader("b", "g", UTF8StringSerializer())
            await _own(b, 2)  # only b reads meanwhile
            owned = len(a.assignment())
            await b.close()
            await a.close()
            return owned, 2

    owned, expected = asyncio.run(main())
    assert owned == expected
