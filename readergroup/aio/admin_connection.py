"""The managers' and the readers' connections beside an asyncio factory's:
:func:`admin_connection_of` and :func:`reader_connection_of` (Redis or memory, whichever the
factory's connection is)."""

from __future__ import annotations

from typing import Any

from readergroup.core.errors import InvalidConfigError
from readergroup.storage.aio_admin import AsyncAdminConnection
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.aio_reader_connection import (
    AsyncReaderConnection,
    AsyncRedisReaderConnection,
)
from readergroup.testing.aio_memory import AsyncMemoryConnection
from readergroup.testing.aio_memory_admin import AsyncMemoryAdminConnection
from readergroup.testing.aio_memory_reader import AsyncMemoryReaderConnection


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


def reader_connection_of(
    connection: Any, admin: AsyncAdminConnection | AsyncMemoryAdminConnection
) -> AsyncReaderConnection:
    """What asyncio readers use on ``connection`` (as :func:`admin_connection_of`: the same
    Redis, or the same memory, whose threaded readers and asyncio ones form one group), sharing
    what ``admin`` (:func:`admin_connection_of` of it) opened: one set of connections per
    factory."""
    if isinstance(connection, AsyncMemoryConnection) and isinstance(
        admin, AsyncMemoryAdminConnection
    ):
        return AsyncMemoryReaderConnection(connection, admin)
    if isinstance(connection, AsyncConnection) and isinstance(admin, AsyncAdminConnection):
        return AsyncRedisReaderConnection(admin)
    raise InvalidConfigError(f"no asyncio readers' connection for {type(connection).__name__}")
