"""Heartbeats, run unchanged on every store: ``RedisHeartbeatStore`` (``heartbeat.lua``, the
server's clock), its asyncio twin ``AsyncHeartbeatStore`` (driven here through an event loop of
its own) and ``MemoryHeartbeatStore`` (an injected clock, for simulations). A zombie
(an older generation of the same reader id) can neither overwrite nor delete its
replacement's heartbeat; a claim writes whatever is stored; an observer changes nothing."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from readergroup.core.group_state import ReaderRecord
from readergroup.core.membership import HeartbeatStore
from readergroup.core.names import group_sync_name
from readergroup.storage.aio_heartbeat_store import AsyncHeartbeatStore
from readergroup.storage.connection import RedisConnection
from readergroup.testing.memory_heartbeats import MemoryHeartbeatStore
from tests.support.fetchers import async_client


class Awaited:
    """An asyncio store's methods called as plain ones, each run on ``loop``."""

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.store, self.loop = store, loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.store, name)
        return lambda *args, **kwargs: self.loop.run_until_complete(method(*args, **kwargs))


@pytest.fixture(params=["memory", "redis", "aio"])
def beats(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        ticks = itertools.count(1_700_000_000_000)
        yield MemoryHeartbeatStore(lambda: next(ticks))
        return
    url = request.getfixturevalue("redis_url")
    connection = RedisConnection.from_url(url)
    name = group_sync_name("s", f"g{uuid.uuid4().hex[:10]}")
    try:
        if request.param == "redis":
            yield connection.heartbeat_store(name)
            return
        loop = asyncio.new_event_loop()
        client = async_client(url)
        yield Awaited(AsyncHeartbeatStore(client, connection.keys, name), loop)
        loop.run_until_complete(client.aclose())
        loop.close()
    finally:
        connection.close()


def test_threaded_and_asyncio_readers_share_one_groups_heartbeats(redis_url: str) -> None:
    connection = RedisConnection.from_url(redis_url)
    name = group_sync_name("s", f"g{uuid.uuid4().hex[:10]}")
    threaded = connection.heartbeat_store(name)

    async def beat_async() -> tuple[int, dict[str, tuple[int, int]]]:
        client = async_client(redis_url)
        try:
            store = AsyncHeartbeatStore(client, connection.keys, name)
            await store.register("a", "host/2")
            return await store.beat("a", 3)
        finally:
            await client.aclose()

    try:
        threaded.beat("t", 1)
        threaded.register("t", "host/1")
        _, seen = asyncio.run(beat_async())
        assert {reader: entry[0] for reader, entry in seen.items()} == {"t": 1, "a": 3}
        assert threaded.clients() == {"t": "host/1", "a": "host/2"}
        threaded.delete()
    finally:
        connection.close()


def test_a_beat_is_stamped_with_the_stores_clock(beats: HeartbeatStore) -> None:
    now, seen = beats.beat("r1", 1)
    assert seen == {"r1": (1, seen["r1"][1])} and 0 < seen["r1"][1] <= now
    later, seen = beats.beat("", 0)  # an observer's read changes nothing
    assert later >= now and set(seen) == {"r1"}


def test_a_zombie_neither_overwrites_nor_deletes_its_replacement(beats: HeartbeatStore) -> None:
    beats.beat("r1", 1)
    beats.beat("r1", 2)  # the replacement, a newer generation
    _, seen = beats.beat("r1", 1)  # the zombie resumes
    assert seen["r1"][0] == 2
    beats.forget("r1", 1)
    assert beats.beat("", 0)[1]["r1"][0] == 2
    beats.forget("r1", 2)
    assert "r1" not in beats.beat("", 0)[1]


def test_a_claim_writes_whatever_is_stored(beats: HeartbeatStore) -> None:
    beats.beat("r1", 5)
    _, seen = beats.beat("r1", 1, claim=True)
    assert seen["r1"][0] == 1


def test_registered_clients_are_kept_until_the_group_is_deleted(beats: Any) -> None:
    beats.register("r1", "host/1")
    beats.register("r1", "host/2")  # a rejoin overwrites
    beats.beat("r1", 1)
    assert beats.clients() == {"r1": "host/2"}
    beats.delete()
    assert beats.clients() == {} and beats.beat("", 0)[1] == {}


def test_announced_formats_are_withdrawn_by_generation(beats: Any) -> None:
    beats.announce(ReaderRecord("r1", 2, 100), 3)
    beats.announce(ReaderRecord("r2", 1, 200), 3)
    assert beats.announcements() == {"r1": (2, 100, 3), "r2": (1, 200, 3)}
    beats.withdraw("r1", 1)  # an older incarnation's removal keeps the newer one's
    beats.withdraw("r2", 1)
    assert beats.announcements() == {"r1": (2, 100, 3)}
    beats.delete()
    assert beats.announcements() == {}


def test_one_renewal_per_interval_lists_every_heartbeat(beats: HeartbeatStore) -> None:
    """A member's periodic beat is O(1): its own entry as stored before, and every heartbeat
    only for the one member whose turn it is to judge expiries (at most once per interval)."""
    for reader in ("r1", "r2", "r3"):
        beats.beat(reader, 1)
    every = {"session_ms": 10_000, "judge_every_ms": 60_000}
    renewals = [beats.renew(reader, 1, **every) for reader in ("r1", "r2", "r3")]
    assert [r.beats is not None for r in renewals] == [True, False, False]
    assert renewals[0].beats is not None and set(renewals[0].beats) == {"r1", "r2", "r3"}
    again = beats.renew("r2", 1, **every)
    assert again.beats is None and again.before == (1, renewals[1].now_ms)
    assert beats.renew("r4", 1, **every).before is None  # a missing entry: reported as such
    judged = beats.renew("r3", 1, judge=True, **every).beats
    assert judged is not None and set(judged) == {"r1", "r2", "r3", "r4"}
    assert set(beats.beat("", 0)[1]) == {"r1", "r2", "r3", "r4"}  # the due time is no reader


def test_forgetting_the_last_reader_leaves_no_key_behind(redis_url: str) -> None:
    """The due time of the next judgement is no reader: once the last one is forgotten (it left,
    or its group was deleted under it) the hash goes."""
    connection = RedisConnection.from_url(redis_url)
    try:
        store = connection.heartbeat_store(group_sync_name("s", f"g{uuid.uuid4().hex[:10]}"))
        store.renew("r1", 1, session_ms=10_000, judge_every_ms=3_000)  # judges: writes ~due
        store.forget("r1", 1)
        assert connection.client.exists(store.key) == 0
    finally:
        connection.close()
