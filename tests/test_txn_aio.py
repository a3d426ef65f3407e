"""Transactions from asyncio code (issue 29): what only the asyncio writer has (cancelled
tasks, ``async with``, asyncio readers in consume-transform-produce) and its interplay with
threaded writers. The writer's rules themselves run on both writers in
``tests/test_transactions.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from readergroup.aio.transactions import AsyncTransaction, AsyncTransactionalEventStreamWriter
from readergroup.client.transactions import TransactionalWriterConfig
from readergroup.core.errors import TransactionClosedError, TransactionFencedError
from readergroup.core.transactions import PlanEntry, TxnStatus

KEYS = 16


@pytest.fixture
def streams(manager: StreamManager, scope: str) -> str:
    for name, segments in (("in", 2), ("out", 4)):
        manager.create_stream(
            scope, name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )
    return scope


def output(factory: EventStreamClientFactory) -> list[tuple[str, bytes]]:
    client = factory.create_batch_client()
    return [(e.routing_key or "", e.payload) for e in client.read_events("out")]


def by_key(events: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for key, payload in events:
        out.setdefault(key, []).append(payload)
    return out


def run(
    scope: str, url: str, body: Callable[[AsyncEventStreamClientFactory], Awaitable[Any]]
) -> Any:
    """``body(factory)`` in a fresh event loop, on an asyncio factory of ``scope``."""

    async def main() -> Any:
        async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
            return await body(factory)

    return asyncio.run(main())


async def writer_of(
    factory: AsyncEventStreamClientFactory, transactional_id: str = "t", **config: Any
) -> AsyncTransactionalEventStreamWriter[bytes]:
    settings = TransactionalWriterConfig(transactional_id=transactional_id, **config)
    return await factory.create_transactional_writer("out", BytesSerializer(), settings)


async def write_keys(
    txn: AsyncTransaction[bytes], tag: str, per_key: int = 3
) -> list[tuple[str, bytes]]:
    written = []
    for i in range(per_key):
        for k in range(KEYS):
            payload = f"{tag}{k}:{i}".encode()
            await txn.write_event(payload, routing_key=f"k{k}")
            written.append((f"k{k}", payload))
    return written


class Crash(BaseException):
    """Stands for the process dying."""


def test_a_commit_cancelled_while_its_events_land_is_completed_by_committing_again(
    factory: EventStreamClientFactory, streams: str, redis_url: str
) -> None:
    """The commit's task is cancelled after the decision, once one segment took its share:
    the transaction is COMMITTING (a definite state, which status() reports); committing again
    completes it, every event once, in key order."""

    async def body(aio: AsyncEventStreamClientFactory) -> None:
        writer = await writer_of(aio)
        txn = await writer.begin()
        written = await write_keys(txn, "a")
        one_landed = asyncio.Event()
        writer.completer.after_entry = lambda entry: one_landed.set()
        task = asyncio.create_task(txn.commit())
        await one_landed.wait()
        task.cancel()  # while it awaits the next segment's append
        with pytest.raises(asyncio.CancelledError):
            await task
        writer.completer.after_entry = None
        record = await writer.store.record(txn.id)
        assert record is not None and record.status is TxnStatus.COMMITTING
        partial = output(factory)
        assert 0 < len(partial) < len(written)  # in flight, as after a crash between segments
        await txn.commit()  # completes it
        assert await txn.status() is TxnStatus.COMMITTED
        seen = output(factory)
        assert sorted(seen) == sorted(written) and by_key(seen) == by_key(written)
        with pytest.raises(TransactionClosedError):
            await txn.commit()

    run(streams, redis_url, body)


def test_a_commit_cancelled_at_any_point_leaves_a_definite_state_and_never_lands_twice(
    factory: EventStreamClientFactory, streams: str, redis_url: str
) -> None:
    """Commits cancelled after 0, 1, 2, ... turns of the loop (before the decision, while its
    script runs, between the segments' appends, at the end): each leaves OPEN (nothing of it
    visible; committing again commits it) or COMMITTING/COMMITTED (committing again completes
    it, or says it is committing when the decision's reply was lost with the cancellation;
    status() completes it). Every transaction's events land once, in key order."""

    async def body(aio: AsyncEventStreamClientFactory) -> set[str]:
        writer = await writer_of(aio)
        expected: list[tuple[str, bytes]] = []
        outcomes: set[str] = set()
        turns = 0
        while "finished" not in outcomes:
            assert turns < 2000, f"a commit took over {turns} turns of the loop"
            txn = await writer.begin()
            written = await write_keys(txn, f"n{turns}-", per_key=2)
            await txn.flush()  # (half staged before the commit, half staged by it)
            written += await write_keys(txn, f"m{turns}-", per_key=1)
            task = asyncio.create_task(txn.commit())
            for _ in range(turns):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
                outcomes.add("finished")
            except asyncio.CancelledError:
                record = await writer.store.record(txn.id)
                assert record is not None
                outcomes.add(record.status.value)
                if record.status is TxnStatus.OPEN:
                    mine = {p for _, p in written}
                    assert not [e for e in output(factory) if e[1] in mine]
                try:
                    await txn.commit()
                except TransactionClosedError as exc:  # the decision's reply was lost
                    assert exc.status == TxnStatus.COMMITTING.value
                    outcomes.add("reply lost")
            assert await txn.status() is TxnStatus.COMMITTED
            expected += written
            turns += 1 + turns // 8
            seen = output(factory)
            assert sorted(seen) == sorted(expected)
            assert by_key(seen) == by_key(expected)
        return outcomes

    outcomes = run(streams, redis_url, body)
    assert {"OPEN", "finished"} <= outcomes, outcomes  # cancelled before and after it all


def test_async_with_commits_at_the_end_and_aborts_on_an_exception(
    factory: EventStreamClientFactory, streams: str, redis_url: str
) -> None:
    async def body(aio: AsyncEventStreamClientFactory) -> None:
        writer = await writer_of(aio)
        async with writer.begin() as txn:
            await txn.write_event(b"kept", routing_key="k")
        assert await txn.status() is TxnStatus.COMMITTED
        with pytest.raises(ValueError):
            async with writer.begin() as failed:
                await failed.write_event(b"dropped", routing_key="k")
                await failed.flush()
                raise ValueError("the transform failed")
        assert await failed.status() is TxnStatus.ABORTED
        async with writer.begin() as explicit:  # committed inside: nothing more at the end
            await explicit.write_event(b"also", routing_key="k")
            await explicit.commit()
        assert output(factory) == [("k", b"kept"), ("k", b"also")]

    run(streams, redis_url, body)


def test_threaded_and_asyncio_instances_of_an_id_fence_each_other_and_share_transactions(
    factory: EventStreamClientFactory, streams: str, redis_url: str
) -> None:
    config = TransactionalWriterConfig(transactional_id="shared")
    threaded = factory.create_transactional_writer("out", BytesSerializer(), config)
    open_txn = threaded.begin()
    open_txn.write_event(b"by threads", routing_key="k")
    open_txn.flush()

    async def body(aio: AsyncEventStreamClientFactory) -> None:
        writer = await writer_of(aio, "shared")
        assert writer.epoch == threaded.epoch + 1
        taken = await writer.get_txn(open_txn.id)  # the threaded one's, resumed here
        await taken.write_event(b"by a task", routing_key="k")
        await taken.commit()

    run(streams, redis_url, body)
    with pytest.raises(TransactionFencedError):
        threaded.begin()
    assert output(factory) == [("k", b"by threads"), ("k", b"by a task")]


async def drain_into(
    reader: AsyncEventStreamReader[bytes],
    writer: AsyncTransactionalEventStreamWriter[bytes],
    quiet: float,
) -> int:
    """Consume-transform-produce until nothing comes for ``quiet`` seconds: each batch's
    output committed with the reader's positions; returns how many events it handled."""
    handled = 0
    while True:
        batch = [e for e in await reader.read_batch(7, timeout=quiet) if e.is_event]
        if not batch:
            return handled
        async with writer.begin() as txn:
            for event in batch:
                await txn.write_event(b"out-" + (event.event or b""), routing_key=event.routing_key)
            await txn.send_positions(reader)
        handled += len(batch)


def test_consume_transform_produce_with_an_asyncio_reader_is_exactly_once_across_a_crash(
    factory: EventStreamClientFactory, streams: str, redis_url: str
) -> None:
    """An asyncio reader and writer commit each batch's output with the reader's positions;
    the process dies in the middle of a commit (decided, partly landed, its positions not in
    the group yet) with more events handed out and not committed. The restarted reader (same
    id) resumes after the last decided transaction's positions: every input event's output
    lands exactly once."""
    ReaderGroupManager(streams, factory.connection).create_reader_group(
        "g", ReaderGroupConfig(streams=[f"{streams}/in"], commit_mode="manual")
    )
    plain = factory.create_event_writer("in", BytesSerializer())
    inputs = [f"e{i}".encode() for i in range(60)]
    for i, event in enumerate(inputs):
        plain.write_event(event, routing_key=f"k{i % 5}")
    plain.flush()

    async def crashing(aio: AsyncEventStreamClientFactory) -> None:
        reader = await aio.create_reader("r1", "g", BytesSerializer())
        writer = await writer_of(aio, "pipe")
        await writer.bind_reader(reader)
        for _ in range(2):  # two batches committed
            batch = [e for e in await reader.read_batch(10, timeout=2) if e.is_event]
            assert batch
            txn = await writer.begin()
            for event in batch:
                await txn.write_event(b"out-" + (event.event or b""), routing_key=event.routing_key)
            await txn.commit(reader=reader)
        batch = [e for e in await reader.read_batch(10, timeout=2) if e.is_event]
        txn = await writer.begin()
        for event in batch:
            await txn.write_event(b"out-" + (event.event or b""), routing_key=event.routing_key)
        await txn.send_positions(reader)

        def die(entry: PlanEntry) -> None:
            raise Crash

        writer.completer.after_entry = die
        with pytest.raises(Crash):
            await txn.commit()
        more = await reader.read_batch(10, timeout=2)  # handed out, never committed
        assert more
        reader._stop.set()  # the process is gone: no heartbeat, no leave, no commit

    async def restarted(aio: AsyncEventStreamClientFactory) -> int:
        writer = await writer_of(aio, "pipe")  # fences the dead instance
        reader = await aio.create_reader("r1", "g", BytesSerializer())  # takes r1 over
        await writer.bind_reader(reader)
        return await drain_into(reader, writer, quiet=1.0)

    asyncio.run(_without_closing(streams, redis_url, crashing))
    run(streams, redis_url, restarted)
    out = [payload for _, payload in output(factory)]
    assert len(out) == len(set(out)), "an input event's output landed twice"
    assert sorted(out) == sorted(b"out-" + e for e in inputs)


async def _without_closing(
    scope: str, url: str, body: Callable[[AsyncEventStreamClientFactory], Awaitable[Any]]
) -> None:
    """``body`` on a factory that is then dropped as a dead process's is (its connection
    closed, nothing else: no reader leaves, no writer flushes)."""
    aio = AsyncEventStreamClientFactory.from_url(scope, url)
    try:
        await body(aio)
    finally:
        await aio.connection.close()


def test_the_asyncio_metrics_collector_counts_unfinished_transactions(
    factory: EventStreamClientFactory, streams: str, redis_url: str
) -> None:
    """``readergroup_stream_transactions`` and ``readergroup_stream_oldest_transaction_seconds``
    from ``await collector.refresh()``, as the threaded collector reports them."""

    async def body(aio: AsyncEventStreamClientFactory) -> tuple[dict[Any, float], ...]:
        writer = await writer_of(aio, "m")
        first, second = await writer.begin(), await writer.begin()
        await second.write_event(b"z", routing_key="k")
        await second.flush()
        collector = aio.metrics_collector()
        await collector.refresh()
        during = metric_values(collector.collect())
        await first.abort()
        await second.commit()
        await collector.refresh()
        return during, metric_values(collector.collect())

    during, after = run(streams, redis_url, body)
    open_out = ("readergroup_stream_transactions", (streams, "out", "OPEN"))
    oldest = ("readergroup_stream_oldest_transaction_seconds", (streams, "out"))
    assert during[open_out] == 2
    assert during[("readergroup_stream_transactions", (streams, "in", "OPEN"))] == 0
    assert during[oldest] >= 0
    assert after[open_out] == 0 and after[oldest] == 0


def metric_values(families: Any) -> dict[Any, float]:
    return {
        (s.name, tuple(s.labels.values())): s.value for family in families for s in family.samples
    }


def test_the_memory_backend_has_no_transactions_in_asyncio_either() -> None:
    """As the threaded factory on the memory backend: a typed error, not a half-working
    writer."""
    from readergroup.core.errors import InvalidConfigError
    from readergroup.testing.aio_memory import AsyncMemoryConnection
    from readergroup.testing.memory_connection import MemoryConnection

    async def body() -> None:
        factory = AsyncEventStreamClientFactory("shop", AsyncMemoryConnection(MemoryConnection()))
        async with factory:
            with pytest.raises(InvalidConfigError, match="Redis"):
                await writer_of(factory)

    asyncio.run(body())
