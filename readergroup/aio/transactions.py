"""``AsyncTransactionalEventStreamWriter`` and ``AsyncTransaction``: all-or-nothing writes to a
stream from asyncio code, never blocking the loop.

The same writer as the threaded :class:`~readergroup.client.transactions.
TransactionalEventStreamWriter`, over the same decisions (:mod:`readergroup.client.txn_steps`:
states, validation, what a commit does, completion, the sweep, consume-transform-produce
positions, errors and logging), awaited on ``redis.asyncio`` through
:class:`~readergroup.storage.aio_txn_store.AsyncTxnStore` (the same ``txn_*.lua`` scripts). It
shares transactions with threaded writers: an asyncio instance of a transactional id fences a
threaded one and the other way round; either completes what the other decided.

Create with ``await factory.create_transactional_writer(stream, serializer, config)`` (an
:class:`~readergroup.aio.factory.AsyncEventStreamClientFactory`)::

    async with writer.begin() as txn:           # commits at the end, aborts on an exception
        await txn.write_event(order, routing_key=customer)

    txn = await writer.begin()
    await txn.write_event(...)
    await txn.send_positions(reader)            # exactly-once consume-transform-produce
    await txn.commit()

Cancellation: a task cancelled in a call leaves the transaction in a state ``await
txn.status()`` reports. Cancelled while staging (``write_event``, ``flush``), whether the
events are staged is unknown: it can only be aborted. Cancelled before the commit decision
landed, it is still OPEN and ``commit()`` again commits it; cancelled after (while the events
go to their segments), it is COMMITTING and ``commit()`` again (or ``status()``, or any
client's sweep after ``completion_grace``) completes it, every event once. If the decision ran
but its reply was lost with the cancellation, ``commit()`` again raises
:class:`~readergroup.core.errors.TransactionClosedError` (status ``COMMITTING``) and
``status()`` completes it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from readergroup.aio.metadata import AsyncStreamMetadataCache
from readergroup.aio.reader import AsyncEventStreamReader
from readergroup.client.serializers import Serializer
from readergroup.client.transactions import TransactionalWriterConfig, wall_clock_ms_now
from readergroup.client.txn_completion import TxnCompleter
from readergroup.client.txn_positions import ClaimSteps, PositionsClaim, bind_steps
from readergroup.client.txn_steps import TxnCore, TxnWriterCore
from readergroup.core.errors import InvalidConfigError
from readergroup.core.group_state import SegKey
from readergroup.core.headers import Headers
from readergroup.core.names import validate_name
from readergroup.core.transactions import TxnRecord, TxnStatus
from readergroup.storage.aio_calls import drive_async
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_txn_store import async_transactions
from readergroup.storage.staging_store import StagedEvent
from statesync.clock import Clock
from statesync.system_clock import SYSTEM_CLOCK

T = TypeVar("T")


class AsyncTxnCompleter(TxnCompleter):
    """A :class:`~readergroup.client.txn_completion.TxnCompleter` on awaited parts:
    ``await completer.complete(record)``."""

    async def complete(  # type: ignore[override]
        self, record: TxnRecord, staged: Sequence[StagedEvent] | None = None
    ) -> None:
        await drive_async(self.complete_steps(record, staged))


class AsyncTransactionalEventStreamWriter(TxnWriterCore[T]):
    """Writes events of type ``T`` to one stream in transactions, awaited. Create with
    :meth:`AsyncEventStreamClientFactory.create_transactional_writer
    <readergroup.aio.factory.AsyncEventStreamClientFactory.create_transactional_writer>`
    (or :meth:`create`). Use it from one event loop."""

    completer: AsyncTxnCompleter

    def __init__(
        self,
        connection: AsyncConnection,
        metadata: AsyncStreamMetadataCache,
        scope: str,
        stream: str,
        serializer: Serializer[T],
        config: TransactionalWriterConfig,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
    ) -> None:
        """Not started: :meth:`create` makes a started one."""
        super().__init__(
            connection,
            metadata,
            async_transactions(connection, scope, stream),
            scope,
            stream,
            serializer,
            config,
            clock=clock or SYSTEM_CLOCK,
            rng=rng,
            wall_clock_ms=wall_clock_ms or wall_clock_ms_now,
            completer_type=AsyncTxnCompleter,
        )

    @classmethod
    async def create(
        cls, *args: Any, epoch: int | None = None, **kwargs: Any
    ) -> AsyncTransactionalEventStreamWriter[T]:
        """A started writer (``args`` and ``kwargs``: the constructor's): a new instance of
        ``config.transactional_id``, fencing every older one (``epoch``: act as the instance
        of that epoch instead), having swept the stream and completed what an earlier
        instance of the id decided."""
        writer = cls(*args, **kwargs)
        await drive_async(writer.start_steps(epoch))
        return writer

    # -- public API -------------------------------------------------------------------------
    def begin(self) -> BeginTransaction[T]:
        """Begin a transaction (OPEN for ``lease`` seconds, renewed by every write):
        ``txn = await writer.begin()``, or ``async with writer.begin() as txn:`` (committed
        when the block ends, aborted when it raises)."""
        return BeginTransaction(self)

    async def get_txn(self, txn_id: str) -> AsyncTransaction[T]:
        """The transaction ``txn_id``, begun by any writer of this stream (threaded or
        asyncio), also one whose process died: an open one is taken over by this writer, to
        commit or abort; a committing one is completed first."""
        await drive_async(self.adopt_steps(txn_id))
        txn: AsyncTransaction[T] = AsyncTransaction(self, txn_id, None)
        await txn.status()  # completes it if committing
        return txn

    async def bind_reader(self, reader: AsyncEventStreamReader[Any]) -> None:
        """Make ``reader`` a consumer of this writer's consume-transform-produce pipeline (see
        :meth:`TransactionalEventStreamWriter.bind_reader
        <readergroup.client.transactions.TransactionalEventStreamWriter.bind_reader>`)."""
        await drive_async(bind_steps(self, reader, AsyncClaimer(self, reader)))

    def positions_claim(
        self, reader: AsyncEventStreamReader[Any], positions: Mapping[SegKey, int] | None
    ) -> PositionsClaim:
        """The claim a commit of ``reader``'s ``positions`` makes (see :meth:`bind_reader`)."""
        return super().positions_claim(reader, positions)

    async def sweep(self) -> int:
        """Abort this stream's transactions past their lease and complete committing ones
        whose committer vanished; returns how many were finished."""
        return await drive_async(self.sweep_steps())

    async def close(self) -> None:
        """Close the writer (its factory's close does it too): it and its transactions refuse
        every later call (``WriterClosedError``). Open transactions stay open in Redis, neither
        committed nor aborted, as a Kafka producer's: another writer of the stream can take one
        over with ``get_txn`` and commit it, or it is aborted when its lease ends. Events
        written to one and not flushed yet are not staged (``flush()`` before handing one
        over)."""
        self._closed = True

    async def __aenter__(self) -> AsyncTransactionalEventStreamWriter[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class BeginTransaction(Generic[T]):
    """What :meth:`AsyncTransactionalEventStreamWriter.begin` returns: await it for the
    transaction, or use it in ``async with`` (commit at the end, abort on an exception)."""

    def __init__(self, writer: AsyncTransactionalEventStreamWriter[T]) -> None:
        self._writer = writer
        self._txn: AsyncTransaction[T] | None = None

    async def _begin(self) -> AsyncTransaction[T]:
        txn_id = await drive_async(self._writer.begin_steps())
        return AsyncTransaction(self._writer, txn_id, [])

    def __await__(self) -> Generator[Any, None, AsyncTransaction[T]]:
        return self._begin().__await__()

    async def __aenter__(self) -> AsyncTransaction[T]:
        self._txn = await self._begin()
        return self._txn

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        assert self._txn is not None
        await drive_async(self._txn.exit_steps(failed=kind is not None))


class AsyncTransaction(TxnCore[T]):
    """One transaction, awaited (the threaded :class:`~readergroup.client.transactions.
    Transaction`'s methods, same rules and errors). The tasks of one event loop may share it
    (its state changes under an ``asyncio.Lock``)."""

    def __init__(
        self,
        writer: AsyncTransactionalEventStreamWriter[T],
        txn_id: str,
        events: list[StagedEvent] | None,
    ) -> None:
        super().__init__(writer, txn_id, events, asyncio.Lock())

    async def write_event(
        self, event: T, routing_key: str | None = None, *, headers: Headers | None = None
    ) -> None:
        """Add an event; per routing key, events keep this order when committed. Stages
        (awaits Redis) every ``stage_events`` events and when the lease needs renewing."""
        staged = self._writer._serialize(event, routing_key, headers)
        async with self._lock:
            if self.buffer(staged):
                await drive_async(self.stage_steps())

    async def flush(self) -> None:
        """Stage every event written so far (renewing the lease)."""
        await drive_async(self.flush_steps())

    async def ping(self) -> None:
        """Renew the lease (Pravega's ``pingTxn``); flushes too."""
        await self.flush()

    async def send_positions(
        self, reader: AsyncEventStreamReader[Any], positions: Mapping[SegKey, int] | None = None
    ) -> None:
        """Commit ``reader``'s positions with this transaction (Kafka's
        ``sendOffsetsToTransaction``; see :meth:`Transaction.send_positions
        <readergroup.client.transactions.Transaction.send_positions>`). The reader must be
        bound to the writer (:meth:`AsyncTransactionalEventStreamWriter.bind_reader`)."""
        await drive_async(self.send_positions_steps(reader, positions))

    async def commit(
        self,
        positions: Mapping[SegKey, int] | None = None,
        *,
        reader: AsyncEventStreamReader[Any] | None = None,
    ) -> None:
        """Commit, all or nothing (see :meth:`Transaction.commit
        <readergroup.client.transactions.Transaction.commit>`: the same errors; and the module
        docstring for a cancelled commit)."""
        await drive_async(self.commit_steps(positions, reader))

    async def abort(self) -> None:
        """Abort: nothing of it will ever be visible."""
        await drive_async(self.abort_steps())

    async def status(self) -> TxnStatus:
        """Where it is now; a committing transaction is completed first (whoever began it)."""
        return await drive_async(self.status_steps())


async def open_transactional_writer(
    connection: Any,
    metadata: AsyncStreamMetadataCache,
    scope: str,
    stream: str,
    serializer: Serializer[T],
    config: TransactionalWriterConfig,
    **kwargs: Any,
) -> AsyncTransactionalEventStreamWriter[T]:
    """What :meth:`AsyncEventStreamClientFactory.create_transactional_writer
    <readergroup.aio.factory.AsyncEventStreamClientFactory.create_transactional_writer>` does
    on the factory's connection and metadata cache: a started writer of ``scope/stream``
    (Redis only, as the threaded writer: the memory backend raises ``InvalidConfigError``)."""
    validate_name(stream, "stream")
    if not isinstance(connection, AsyncConnection):
        raise InvalidConfigError("transactions need a Redis connection")
    return await AsyncTransactionalEventStreamWriter.create(
        connection, metadata, scope, stream, serializer, config, **kwargs
    )


class AsyncClaimer(ClaimSteps):
    """The rebalance listener :meth:`AsyncTransactionalEventStreamWriter.bind_reader`
    installs on an asyncio reader (awaited by the reading task before it hands anything out
    of what it acquired)."""

    async def on_segments_acquired(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        await drive_async(self.acquired_steps(reader_id, segments))
