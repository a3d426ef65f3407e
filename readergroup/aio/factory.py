"""``AsyncEventStreamClientFactory``: the asyncio entry point for one scope's data-plane
clients, all sharing one :class:`~readergroup.storage.aio_connection.AsyncConnection` and one
metadata cache.

It creates writers (:meth:`AsyncEventStreamClientFactory.create_event_writer`) and readers
(:meth:`AsyncEventStreamClientFactory.create_reader`).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, TypeVar

from readergroup.aio.admin_connection import admin_connection_of, reader_connection_of
from readergroup.aio.group_manager import AsyncReaderGroupManager
from readergroup.aio.metadata import (
    AsyncStreamMetadataCache,
    SynchronizedStreamStates,
    complete_scale_seals,
)
from readergroup.aio.metrics import AsyncReaderGroupCollector
from readergroup.aio.reader import AsyncEventStreamReader
from readergroup.aio.reader_join import join_group
from readergroup.aio.stream_manager import AsyncStreamManager
from readergroup.aio.transactions import (
    AsyncTransactionalEventStreamWriter,
    open_transactional_writer,
)
from readergroup.aio.writer import AsyncEventStreamWriter
from readergroup.client.serializers import Serializer
from readergroup.client.transactions import TransactionalWriterConfig
from readergroup.client.write_rounds import EventWriterConfig
from readergroup.core.close_failures import CloseFailures
from readergroup.core.config import ClientConfig
from readergroup.core.group_config import ReaderConfig, ReaderGroupConfig
from readergroup.core.names import validate_name
from readergroup.core.stream_config import StreamConfiguration
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_connection_api import AsyncConnectionApi
from readergroup.storage.aio_reader_connection import AsyncReaderConnection

T = TypeVar("T")

logger = logging.getLogger(__name__)


class AsyncEventStreamClientFactory:
    """Entry point for asyncio data-plane clients of one scope.

    Example::

        async with AsyncEventStreamClientFactory.from_url("shop", url) as factory:
            writer = await factory.create_event_writer("orders", UTF8StringSerializer())
            pointer = await writer.write_event("hello", routing_key="customer-7")

    Closing the factory closes every reader, writer (flushed first) and transactional writer it
    created, then the connection (if it owns it). Use it from one event loop.
    """

    def __init__(
        self, scope: str, connection: AsyncConnectionApi, *, owns_connection: bool = False
    ) -> None:
        self._scope = validate_name(scope, "scope")
        self._connection = connection
        self._owns_connection = owns_connection
        self._admin = admin_connection_of(connection)
        self._metadata = AsyncStreamMetadataCache(
            SynchronizedStreamStates(self._admin).fetch,
            connection.config.metadata_ttl,
            repair=functools.partial(complete_scale_seals, connection),
        )
        self._writers: list[AsyncEventStreamWriter[Any]] = []
        self._readers: list[AsyncEventStreamReader[Any]] = []
        self._transactional: list[AsyncTransactionalEventStreamWriter[Any]] = []
        self._reader_connection: AsyncReaderConnection | None = None

    @classmethod
    def from_url(
        cls, scope: str, url: str, config: ClientConfig | None = None
    ) -> AsyncEventStreamClientFactory:
        """A factory on its own connection to ``url`` (connects at the first command)."""
        return cls(scope, AsyncConnection.from_url(url, config), owns_connection=True)

    @property
    def scope(self) -> str:
        return self._scope

    @property
    def connection(self) -> AsyncConnectionApi:
        return self._connection

    async def create_event_writer(
        self,
        stream: str,
        serializer: Serializer[T],
        config: EventWriterConfig | None = None,
        **kwargs: Any,
    ) -> AsyncEventStreamWriter[T]:
        """A writer for ``stream`` of this scope. Raises
        :class:`~readergroup.core.errors.StreamNotFoundError` if it is missing. ``kwargs``:
        :class:`~readergroup.aio.writer.AsyncEventStreamWriter`'s injectable ``clock``,
        ``sleep``, ``rng``, ``wall_clock_ms`` and ``writer_id``."""
        validate_name(stream, "stream")
        state = await self._metadata.get(self._scope, stream)
        writer: AsyncEventStreamWriter[T] = AsyncEventStreamWriter(
            self._connection,
            self._metadata,
            self._scope,
            stream,
            serializer,
            config,
            max_event_size=state.config.max_event_size,
            **kwargs,
        )
        self._writers.append(writer)
        return writer

    async def create_transactional_writer(
        self,
        stream: str,
        serializer: Serializer[T],
        config: TransactionalWriterConfig,
        **kwargs: Any,
    ) -> AsyncTransactionalEventStreamWriter[T]:
        """A transactional writer for ``stream`` of this scope (docs/transactions.md; as
        :meth:`EventStreamClientFactory.create_transactional_writer
        <readergroup.client.client_factory.EventStreamClientFactory.create_transactional_writer>`:
        a new instance of ``config.transactional_id`` fences every older one, threaded or
        asyncio). ``kwargs``: :meth:`AsyncTransactionalEventStreamWriter.create
        <readergroup.aio.transactions.AsyncTransactionalEventStreamWriter.create>`'s."""
        writer: AsyncTransactionalEventStreamWriter[T] = await open_transactional_writer(
            self._connection, self._metadata, self._scope, stream, serializer, config, **kwargs
        )
        self._transactional.append(writer)
        return writer

    # -- managers (aio-admin) ---------------------------------------------------------------
    def stream_manager(self) -> AsyncStreamManager:
        """An :class:`~readergroup.aio.stream_manager.AsyncStreamManager` on this factory's
        connection (closing it leaves the connection open)."""
        return AsyncStreamManager(self._admin)

    def reader_group_manager(self) -> AsyncReaderGroupManager:
        """An :class:`~readergroup.aio.group_manager.AsyncReaderGroupManager` of this scope on
        this factory's connection (closing it leaves the connection open)."""
        return AsyncReaderGroupManager(self._scope, self._admin)

    async def create_stream(self, stream: str, config: StreamConfiguration | None = None) -> bool:
        """Create ``stream`` in this scope; ``False`` if it existed (see
        :meth:`AsyncStreamManager.create_stream`)."""
        return await self.stream_manager().create_stream(self._scope, stream, config)

    def metrics_collector(self) -> AsyncReaderGroupCollector:
        """A Prometheus collector of this scope's reader groups on this factory's connection
        (``await collector.refresh()`` reads them; see :mod:`readergroup.aio.metrics`)."""
        return AsyncReaderGroupCollector(self._admin, [self._scope])

    async def create_reader_group(self, group: str, config: ReaderGroupConfig) -> bool:
        """Create reader group ``group`` of this scope; ``False`` if it existed (see
        :meth:`AsyncReaderGroupManager.create_reader_group`)."""
        return await self.reader_group_manager().create_reader_group(group, config)

    # -----------------------------------------------------------------------------------------
    async def create_reader(
        self,
        reader_id: str,
        group: str,
        serializer: Serializer[T],
        config: ReaderConfig | None = None,
        **kwargs: Any,
    ) -> AsyncEventStreamReader[T]:
        """Join ``reader_id`` to reader group ``group`` of this scope and return its reader
        (as :meth:`EventStreamClientFactory.create_reader
        <readergroup.client.client_factory.EventStreamClientFactory.create_reader>`: static
        membership, ``ReaderConfig(takeover=False)``, the same errors). ``kwargs``: the
        reader's injectable ``clock`` and ``rng``."""
        connection = self._reader_side()
        takeover = (config or ReaderConfig()).takeover
        member, group_config = await join_group(
            connection, self._scope, group, reader_id, takeover=takeover
        )
        reader: AsyncEventStreamReader[T] = AsyncEventStreamReader(
            connection, member, group_config, serializer, config, **kwargs
        )
        self._readers.append(reader)
        return reader

    def _reader_side(self) -> AsyncReaderConnection:
        if self._reader_connection is None:
            self._reader_connection = reader_connection_of(self._connection, self._admin)
        return self._reader_connection

    async def close(self) -> None:
        """Close every reader created here (each leaves its group), then every writer (each
        flushes first), then every transactional writer, then the connection; raise the first
        failure, if any, once all are closed, logging any later one (a writer whose flush
        raises does not leave the others' events unsent). A transactional writer's open
        transactions stay open, as its own ``close()`` leaves them: resumable with
        ``get_txn`` until their lease ends, then aborted."""
        readers, self._readers = self._readers, []
        writers, self._writers = self._writers, []
        transactional, self._transactional = self._transactional, []
        failures = CloseFailures(logger)
        try:
            closeables: list[
                AsyncEventStreamReader[Any]
                | AsyncEventStreamWriter[Any]
                | AsyncTransactionalEventStreamWriter[Any]
            ]
            closeables = [*readers, *writers, *transactional]
            for closeable in closeables:
                with failures.closing(closeable):
                    await closeable.close()
        finally:
            await self._admin.close()
            if self._reader_connection is not None:
                await self._reader_connection.close()
            if self._owns_connection:
                await self._connection.close()
        failures.raise_first()

    async def __aenter__(self) -> AsyncEventStreamClientFactory:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
