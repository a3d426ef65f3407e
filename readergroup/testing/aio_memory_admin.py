"""The memory backend for the asyncio managers: :class:`AsyncMemoryAdminConnection` gives
:mod:`readergroup.admin.stream_steps` and :mod:`readergroup.admin.group_steps` a
:class:`~readergroup.testing.memory_connection.MemoryConnection`'s segments, records and
heartbeats (in-process: their calls never wait on I/O, so they are not awaited) and asyncio
synchronizers over its logs, so asyncio managers and threaded clients of one memory
connection share its streams and groups, as they share a Redis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from readergroup.core.config import ClientConfig
from readergroup.storage.aio_admin import open_synchronizer
from readergroup.testing.memory_connection import MemoryConnection
from statesync import AsyncStateSynchronizer, Update
from statesync.aio_memory_backend import AsyncMemoryLogBackend


class AsyncMemoryAdminConnection:
    """An asyncio managers' view of ``memory`` (it does not own it)."""

    def __init__(self, memory: MemoryConnection) -> None:
        self.memory = memory
        self.config: ClientConfig = memory.config
        self.keys = memory.keys
        self.log_backend = AsyncMemoryLogBackend(memory.log_backend)
        self.segments = memory.segments
        self.records = memory.records
        self.server_time_ms = memory.server_time_ms
        self.forget_stream = memory.forget_stream
        self.heartbeat_store = memory.heartbeat_store

    def synchronizer(
        self,
        name: str,
        update_types: Sequence[type[Update]],
        state_types: Sequence[type] = (),
        writer_label: str | None = None,
    ) -> AsyncStateSynchronizer[Any]:
        return open_synchronizer(
            self.log_backend,
            self.memory._sync_config,
            name,
            update_types,
            state_types,
            writer_label,
        )

    async def close(self) -> None:
        return None
