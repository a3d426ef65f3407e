"""The memory backend for the asyncio managers: :class:`AsyncMemoryAdminConnection` gives
:mod:`readergroup.admin.stream_steps` and :mod:`readergroup.admin.group_steps` a
:class:`~readergroup.testing.memory_connection.MemoryConnection`'s segments, records and
heartbeats (in-process: their calls never wait on I/O, so they are not awaited) and asyncio
synchronizers over its logs, so asyncio managers and threaded clients of one memory
connection share its streams and groups, as they share a Redis."""

from __future__ import annotations

from readergroup.core.config import ClientConfig
from readergroup.storage.aio_admin import AsyncSynchronizerSource
from readergroup.testing.memory_connection import MemoryConnection
from statesync.aio_memory_backend import AsyncMemoryLogBackend


class AsyncMemoryAdminConnection(AsyncSynchronizerSource):
    """An asyncio managers' view of ``memory`` (it does not own it)."""

    def __init__(self, memory: MemoryConnection) -> None:
        self.memory = memory
        self.config: ClientConfig = memory.config
        self.keys = memory.keys
        self.log_backend = AsyncMemoryLogBackend(memory.log_backend)
        self.sync_config = memory._sync_config
        self.segments = memory.segments
        self.records = memory.records
        self.subscribers = memory.subscribers
        self.server_time_ms = memory.server_time_ms
        self.forget_stream = memory.forget_stream
        self.heartbeat_store = memory.heartbeat_store

    async def close(self) -> None:
        return None
