"""Rebalance listeners of the asyncio reader under cancellation (issue 29), on a real Redis:
each listener hears each acquisition and release once (as Kafka's ConsumerRebalanceListener),
even when the read call that tells it is cancelled while it awaits a coroutine listener.

What a cancelled read call does (see ``docs/asyncio-reader.md``): the listener being awaited is
cancelled at its await like any code of the task, and counts as told; the listener calls that
call had still to make are made, once each, by the reader's next read call (or by ``close()``)
before anything else; the change itself (acquired segments handed out, a release sent) is
carried out only once every listener was told of it."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from readergroup import UTF8StringSerializer
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from readergroup.core.group_state import SegKey
from readergroup.core.reader_machine import SegmentPhase
from readergroup.storage.connection import RedisConnection
from tests.support import fetchers
from tests.test_aio_reader import keyed, make_group, write

connection = fetchers.redis_connection  # (the fixture, under this name here)


class Blocking:
    """A coroutine listener that, while ``blocked``, waits in each call until cancelled (it
    records the cancellation); every call is recorded, per segment."""

    def __init__(self) -> None:
        self.acquired: Counter[SegKey] = Counter()
        self.released: Counter[SegKey] = Counter()
        self.cancelled: list[str] = []
        self.blocked = False
        self.entered = asyncio.Event()

    async def _hear(self, kind: str, counts: Counter[SegKey], segments: list[Any]) -> None:
        counts.update(segments)
        if self.blocked:
            self.entered.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.append(kind)
                raise

    async def on_segments_acquired(self, reader_id: str, segments: list[Any]) -> None:
        await self._hear("acquired", self.acquired, segments)

    async def on_segments_released(self, reader_id: str, segments: list[Any]) -> None:
        await self._hear("released", self.released, segments)


class Recording:
    """A plain listener recording every call, per segment."""

    def __init__(self) -> None:
        self.acquired: Counter[SegKey] = Counter()
        self.released: Counter[SegKey] = Counter()

    def on_segments_acquired(self, reader_id: str, segments: list[Any]) -> None:
        self.acquired.update(segments)

    def on_segments_released(self, reader_id: str, segments: list[Any]) -> None:
        self.released.update(segments)


async def _reader_with_listeners(
    factory: AsyncEventStreamClientFactory, reader_id: str
) -> tuple[AsyncEventStreamReader[str], Blocking, Recording]:
    """A reader of group ``g`` with a :class:`Blocking` listener, then a :class:`Recording`."""
    reader = await factory.create_reader(reader_id, "g", UTF8StringSerializer())
    first, second = Blocking(), Recording()
    reader.add_rebalance_listener(first)
    reader.add_rebalance_listener(second)
    return reader, first, second


async def _cancel_read_in_listener(reader: AsyncEventStreamReader[str], listener: Blocking) -> None:
    """Read until ``listener`` is entered (blocked), then cancel that read call."""
    listener.entered.clear()
    listener.blocked = True

    async def read() -> None:
        while True:
            await reader.read_next_event(timeout=0.05)

    task = asyncio.create_task(read())
    async with asyncio.timeout(20):
        await listener.entered.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    listener.blocked = False


def test_a_cancelled_read_call_tells_each_acquisition_once_and_then_hands_it_out(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_group(connection, scope)
    write(connection, scope, keyed(40))

    async def main() -> tuple[Blocking, Recording, list[str | None]]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader, first, second = await _reader_with_listeners(factory, "a")
            await _cancel_read_in_listener(reader, first)
            assert first.cancelled == ["acquired"]
            assert not second.acquired  # told by the next read call, not by the cancelled one
            got: list[str | None] = []
            async with asyncio.timeout(20):
                while len(got) < 40:
                    event = await reader.read_next_event(timeout=0.1)
                    if event.is_event:
                        got.append(event.event)
            await reader.close()
            return first, second, got

    first, second, got = asyncio.run(main())
    assert len(first.acquired) == 4 and set(first.acquired.values()) == {1}
    assert second.acquired == first.acquired  # the second listener too: once
    assert sorted(map(str, got)) == sorted(v for _, v in keyed(40))


def test_a_cancelled_read_call_tells_each_release_once_and_the_release_lands(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_group(connection, scope)

    async def main() -> tuple[Blocking, Recording, int, int]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            a, first, second = await _reader_with_listeners(factory, "a")
            async with asyncio.timeout(20):
                while len(a.assignment()) < 4:
                    await a.read_next_event(timeout=0.05)
            b = await factory.create_reader("b", "g", UTF8StringSerializer())
            b_reads = asyncio.create_task(_read_forever(b))
            await _cancel_read_in_listener(a, first)
            assert first.cancelled == ["released"]
            async with asyncio.timeout(20):
                while not (len(a.assignment()) == len(b.assignment()) == 2):
                    await a.read_next_event(timeout=0.05)
            b_reads.cancel()
            await asyncio.gather(b_reads, return_exceptions=True)
            owned = len(a.assignment())
            await a.close()
            await b.close()
            return first, second, owned, len(first.released)

    first, second, owned, _ = asyncio.run(main())
    assert owned == 2
    # two segments released to b once each; close() tells the two a kept, once each
    assert len(first.released) == 4 and set(first.released.values()) == {1}
    assert second.released == first.released


def test_close_after_a_cancelled_read_call_tells_the_rest_once(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """A reader closed after a read call was cancelled in a listener: ``close()`` makes the
    listener calls still to make, then tells every owned segment released, each once."""
    make_group(connection, scope)

    async def main() -> tuple[Blocking, Recording]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader, first, second = await _reader_with_listeners(factory, "a")
            await _cancel_read_in_listener(reader, first)
            await reader.close()
            return first, second

    first, second = asyncio.run(main())
    assert len(first.acquired) == 4 and set(first.acquired.values()) == {1}
    assert second.acquired == first.acquired
    assert second.released == first.released == first.acquired


async def _read_forever(reader: AsyncEventStreamReader[str]) -> None:
    while True:
        await reader.read_next_event(timeout=0.05)


def test_close_does_not_tell_again_a_release_the_listeners_heard(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """A read call told the listeners of a release that is not sent yet (the maintenance task,
    which sends it, is stopped here so that it never is): ``close()`` tells the other segments
    released, not those again."""
    make_group(connection, scope)

    async def main() -> Recording:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            a = await factory.create_reader("a", "g", UTF8StringSerializer())
            heard = Recording()
            a.add_rebalance_listener(heard)
            async with asyncio.timeout(20):
                while len(a.assignment()) < 4:
                    await a.read_next_event(timeout=0.05)
            session: Any = a._session
            b = await factory.create_reader("b", "g", UTF8StringSerializer())
            async with asyncio.timeout(20):  # a's maintenance decides to release two
                while not session.machine.in_phase(SegmentPhase.RELEASING):
                    await asyncio.sleep(0.01)
            session._maintenance.cancel()  # nothing sends the release from here on
            await asyncio.gather(session._maintenance, return_exceptions=True)
            async with asyncio.timeout(20):
                while not heard.released:
                    await a.read_next_event(timeout=0.05)
            await a.close()
            await b.close()
            return heard

    heard = asyncio.run(main())
    assert len(heard.released) == 4 and set(heard.released.values()) == {1}
