"""The managers' connection beside an asyncio factory's: :func:`admin_connection_of`."""

from __future__ import annotations

from typing import Any

from readergroup.storage.aio_admin import AsyncAdminConnection
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.testing.aio_memory import AsyncMemoryConnection
from readergroup.testing.aio_memory_admin import AsyncMemoryAdminConnection


def admin_connection_of(connection: Any) -> AsyncAdminConnection | AsyncMemoryAdminConnection:
    """What the asyncio managers and the metadata source use on ``connection`` (an
    :class:`~readergroup.storage.aio_connection.AsyncConnection`, or the memory backend's
    :class:`~readergroup.testing.aio_memory.AsyncMemoryConnection`): the same Redis, or the
    same memory."""
    if isinstance(connection, AsyncMemoryConnection):
        return AsyncMemoryAdminConnection(connection.memory)
    if isinstance(connection, AsyncConnection):
        return AsyncAdminConnection(connection)
    raise TypeError(f"no managers' connection for {type(connection).__name__}")
