"""Closing a client factory closes every transactional writer it made (issue 29), threaded and
asyncio alike, as a Kafka client's close closes its producers: later calls on the writer or its
transactions raise ``WriterClosedError``; an open transaction stays open (as the writer's own
``close()`` leaves it), resumable with ``get_txn`` by another writer until its lease ends; a
close that raises for one client does not keep the others open. On a real Redis (both servers:
``READERGROUP_TEST_SERVER=valkey|redis``)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.client.transactions import TransactionalWriterConfig
from readergroup.core.errors import StreamSealedError, WriterClosedError
from readergroup.core.transactions import TxnStatus
from tests.test_transactions import STREAM, stream, visible, write_keys

__all__ = ["stream"]  # the fixture shared with test_transactions

CONFIG = TransactionalWriterConfig(transactional_id="closing")
RESCUER = TransactionalWriterConfig(transactional_id="rescuer")


def rescue(factory: EventStreamClientFactory, txn_id: str) -> None:
    """Another process's writer takes the open transaction over and commits it."""
    rescuer = factory.create_transactional_writer(STREAM, BytesSerializer(), RESCUER)
    txn = rescuer.get_txn(txn_id)
    assert txn.status() is TxnStatus.OPEN
    txn.commit()


def test_closing_the_threaded_factory_closes_its_transactional_writers(
    factory: EventStreamClientFactory, stream: str, scope: str, redis_url: str
) -> None:
    with EventStreamClientFactory.from_url(scope, redis_url) as made:
        writer = made.create_transactional_writer(stream, BytesSerializer(), CONFIG)
        txn = writer.begin()
        written = write_keys(txn, keys=8, per_key=3)
        txn.flush()
    with pytest.raises(WriterClosedError):
        writer.begin()
    with pytest.raises(WriterClosedError):
        txn.write_event(b"late", routing_key="k0")
    assert visible(factory) == []
    rescue(factory, txn.id)  # left open, not lost
    assert sorted(visible(factory)) == sorted(written)


def test_closing_the_asyncio_factory_closes_its_transactional_writers(
    factory: EventStreamClientFactory, stream: str, scope: str, redis_url: str
) -> None:
    """``async with`` the factory: its end closes the writer."""

    async def main() -> tuple[str, list[tuple[str, bytes]]]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as made:
            writer = await made.create_transactional_writer(stream, BytesSerializer(), CONFIG)
            txn = await writer.begin()
            written = []
            for i in range(24):
                payload = f"{i % 8}:{i // 8}".encode()
                await txn.write_event(payload, routing_key=f"k{i % 8}")
                written.append((f"k{i % 8}", payload))
            await txn.flush()
        with pytest.raises(WriterClosedError):
            await writer.begin()
        with pytest.raises(WriterClosedError):
            await txn.write_event(b"late", routing_key="k0")
        return txn.id, written

    txn_id, written = asyncio.run(main())
    assert visible(factory) == []
    rescue(factory, txn_id)
    assert sorted(visible(factory)) == sorted(written)


@pytest.mark.parametrize("flavour", ["threaded", "asyncio"])
def test_a_factory_whose_writers_fail_to_close_still_closes_its_transactional_writers(
    flavour: str,
    factory: EventStreamClientFactory,
    manager: StreamManager,
    stream: str,
    scope: str,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two writers made first fail to flush at the close (their streams were sealed under
    them): the factory still closes the transactional writer made after them, raises the
    first failure and logs the second at WARNING with its exception."""
    for name in ("s1", "s2"):
        manager.create_stream(scope, name)
    caplog.set_level(logging.WARNING)
    if flavour == "threaded":
        made = EventStreamClientFactory.from_url(scope, redis_url)
        for name in ("s1", "s2"):
            doomed = made.create_event_writer(name, UTF8StringSerializer())
            doomed.write_event("one").result(10)
            manager.seal_stream(scope, name)
            doomed.write_event("two")
        writer = made.create_transactional_writer(stream, BytesSerializer(), CONFIG)
        with pytest.raises(StreamSealedError):
            made.close()
        with pytest.raises(WriterClosedError):
            writer.begin()
    else:

        async def main() -> None:
            made = AsyncEventStreamClientFactory.from_url(scope, redis_url)
            for name in ("s1", "s2"):
                doomed = await made.create_event_writer(name, UTF8StringSerializer())
                await doomed.write_event("one")
                manager.seal_stream(scope, name)
                await doomed.send("two")
            writer = await made.create_transactional_writer(stream, BytesSerializer(), CONFIG)
            with pytest.raises(StreamSealedError):
                await made.close()
            with pytest.raises(WriterClosedError):
                await writer.begin()

        asyncio.run(main())
    later = [r for r in caplog.records if "failed too" in r.getMessage()]
    assert len(later) == 1 and isinstance(later[0].exc_info[1], StreamSealedError)  # type: ignore[index]
