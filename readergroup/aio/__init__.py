"""The asyncio API (issue 29): clients on ``redis.asyncio`` whose background work runs as
tasks of the caller's event loop, never threads, with the threaded clients' guarantees, errors
and logging. See ``docs/asyncio.md``.

* :class:`AsyncEventStreamClientFactory` (``async with``): ``await
  factory.create_event_writer(stream, serializer)``, ``await factory.create_reader(reader_id,
  group, serializer)``.
* :class:`AsyncEventStreamReader`: ``async for event in reader``, ``await
  reader.read_next_event(timeout=...)``, ``await reader.read_batch(n, timeout=...)``, ``await
  reader.commit()``, ``await reader.close()``, ``async with``.
* :class:`AsyncEventStreamWriter`: ``await writer.write_event(event, routing_key=...)`` (the
  durable acknowledgement), ``await writer.send(...)`` (a future, for pipelining), ``await
  writer.flush()``, ``await writer.close()``, ``async with``.
* :class:`AsyncStreamManager`, :class:`AsyncReaderGroupManager` and :class:`AsyncReaderGroup`:
  the managers, awaited (``factory.stream_manager()``, ``factory.reader_group_manager()``, or
  ``from_url``); :class:`AsyncRetentionManager`; :class:`AsyncReaderGroupCollector`
  (``factory.metrics_collector()``, Prometheus).
* :class:`AsyncTransactionalEventStreamWriter` (``await factory.create_transactional_writer(
  stream, serializer, config)``) and :class:`AsyncTransaction`: ``async with writer.begin() as
  txn``, ``await txn.write_event(...)``, ``await txn.send_positions(reader)``, ``await
  txn.commit()``.
"""

from readergroup.aio.factory import AsyncEventStreamClientFactory
from readergroup.aio.group_manager import AsyncReaderGroup, AsyncReaderGroupManager
from readergroup.aio.metadata import AsyncStreamMetadataCache, AsyncStreamStates
from readergroup.aio.metrics import AsyncReaderGroupCollector
from readergroup.aio.reader import AsyncEventStreamReader
from readergroup.aio.retention import AsyncRetentionManager
from readergroup.aio.stream_manager import AsyncStreamManager
from readergroup.aio.transactions import AsyncTransaction, AsyncTransactionalEventStreamWriter
from readergroup.aio.writer import AsyncEventStreamWriter, AsyncWriteFuture
from readergroup.client.write_rounds import EventPointer, EventWriterConfig

__all__ = [
    "AsyncEventStreamClientFactory",
    "AsyncEventStreamReader",
    "AsyncEventStreamWriter",
    "AsyncReaderGroup",
    "AsyncReaderGroupCollector",
    "AsyncReaderGroupManager",
    "AsyncRetentionManager",
    "AsyncStreamManager",
    "AsyncStreamMetadataCache",
    "AsyncStreamStates",
    "AsyncTransaction",
    "AsyncTransactionalEventStreamWriter",
    "AsyncWriteFuture",
    "EventPointer",
    "EventWriterConfig",
]
