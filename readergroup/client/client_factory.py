"""``EventStreamClientFactory``: creates writers, batch clients (and readers) for one scope,
all sharing one Redis connection and one metadata cache."""

from __future__ import annotations

import logging
import threading
from typing import Any, TypeVar

from readergroup.admin.group_manager import join_group
from readergroup.client.batch_client import BatchClient
from readergroup.client.metadata_cache import StreamMetadataCache
from readergroup.client.reader import EventStreamReader
from readergroup.client.serializers import Serializer
from readergroup.client.transactions import (
    TransactionalEventStreamWriter,
    TransactionalWriterConfig,
)
from readergroup.client.writer import EventStreamWriter, EventWriterConfig
from readergroup.core.close_failures import CloseFailures
from readergroup.core.closing import Closing
from readergroup.core.config import ClientConfig
from readergroup.core.errors import InvalidConfigError
from readergroup.core.group_config import ReaderConfig
from readergroup.core.names import validate_name
from readergroup.storage.connection import RedisConnection
from readergroup.storage.connection_api import Connection

T = TypeVar("T")

logger = logging.getLogger(__name__)


class EventStreamClientFactory(Closing):
    """Entry point for data-plane clients of one scope.

    Example::

        with EventStreamClientFactory.from_url("shop", url) as factory:
            writer = factory.create_event_writer("orders", UTF8StringSerializer())
            writer.write_event("hello", routing_key="customer-7").result(timeout=5)

    Closing the factory closes (flushes) every writer it created, then the connection.
    """

    def __init__(
        self, scope: str, connection: Connection, *, owns_connection: bool = False
    ) -> None:
        self._scope = validate_name(scope, "scope")
        self._connection = connection
        self._owns_connection = owns_connection
        self._metadata = StreamMetadataCache(connection, connection.config.metadata_ttl)
        self._closeables: list[Any] = []
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls, scope: str, url: str, config: ClientConfig | None = None
    ) -> EventStreamClientFactory:
        return cls(scope, RedisConnection.from_url(url, config), owns_connection=True)

    @property
    def scope(self) -> str:
        return self._scope

    @property
    def connection(self) -> Connection:
        return self._connection

    @property
    def metadata(self) -> StreamMetadataCache:
        return self._metadata

    def create_event_writer(
        self,
        stream: str,
        serializer: Serializer[T],
        config: EventWriterConfig | None = None,
        **kwargs: Any,
    ) -> EventStreamWriter[T]:
        """A writer for ``stream`` of this scope. Raises StreamNotFoundError if it is missing."""
        validate_name(stream, "stream")
        writer: EventStreamWriter[T] = EventStreamWriter(
            self._connection, self._metadata, self._scope, stream, serializer, config, **kwargs
        )
        with self._lock:
            self._closeables.append(writer)
        return writer

    def create_transactional_writer(
        self,
        stream: str,
        serializer: Serializer[T],
        config: TransactionalWriterConfig,
        **kwargs: Any,
    ) -> TransactionalEventStreamWriter[T]:
        """A transactional writer for ``stream`` of this scope (docs/transactions.md): a new
        instance of ``config.transactional_id`` fences every older one."""
        validate_name(stream, "stream")
        if not isinstance(self._connection, RedisConnection):
            raise InvalidConfigError("transactions need a Redis connection")
        writer: TransactionalEventStreamWriter[T] = TransactionalEventStreamWriter(
            self._connection, self._metadata, self._scope, stream, serializer, config, **kwargs
        )
        with self._lock:
            self._closeables.append(writer)
        return writer

    def create_reader(
        self,
        reader_id: str,
        group: str,
        serializer: Serializer[T],
        config: ReaderConfig | None = None,
        **kwargs: Any,
    ) -> EventStreamReader[T]:
        """Join ``reader_id`` to reader group ``group`` of this scope and return its reader.

        Static membership: a live reader with this id is fenced and replaced, its segments
        taken over at their committed positions (unless ``ReaderConfig(takeover=False)``:
        then ReaderAlreadyOnlineError until its session expires).
        """
        takeover = (config or ReaderConfig()).takeover
        member, group_config = join_group(
            self._connection, self._scope, group, reader_id, takeover=takeover
        )
        reader: EventStreamReader[T] = EventStreamReader(
            self._connection, member, group_config, serializer, config, **kwargs
        )
        with self._lock:
            self._closeables.append(reader)
        return reader

    def create_batch_client(self) -> BatchClient:
        return BatchClient(self._connection, self._scope)

    def close(self) -> None:
        """Close every writer, transactional writer and reader created here (writers flush
        first), then the connection if the factory owns it; raise the first failure once all
        are closed, logging any later one (a writer whose flush raises does not leave the
        others' events unsent). A transactional writer's open transactions stay open, as its
        own ``close()`` leaves them: resumable with ``get_txn`` until their lease ends."""
        with self._lock:
            closeables, self._closeables = self._closeables, []
        failures = CloseFailures(logger)
        try:
            for item in closeables:
                with failures.closing(item):
                    item.close()
        finally:
            if self._owns_connection:
                self._connection.close()
        failures.raise_first()
