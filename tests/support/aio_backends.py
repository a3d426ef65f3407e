"""Asyncio clients on the test's ``connection`` fixture (memory or real Redis), so asyncio
tests run on both backends as the threaded ones do: :func:`async_factory_of` makes an asyncio
factory on the same data as a threaded connection (the memory connection itself, or a
connection of its own to the same Redis), and :func:`async_factories_of` says how for
:class:`~tests.support.async_reader_adapter.FlavouredFactory`."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.storage.connection_api import Connection
from readergroup.testing.aio_memory import AsyncMemoryConnection
from readergroup.testing.memory_connection import MemoryConnection

AsyncFactories = Callable[[str], AsyncEventStreamClientFactory]
"""Makes an asyncio factory of a scope (call it in the event loop that will use it)."""


def async_factory_of(
    connection: Connection, scope: str, url: str | None = None
) -> AsyncEventStreamClientFactory:
    """An asyncio factory of ``scope`` on ``connection``'s data: the memory itself, or a
    connection of its own to ``url`` (the Redis ``connection`` is on)."""
    if isinstance(connection, MemoryConnection):
        return AsyncEventStreamClientFactory(scope, AsyncMemoryConnection(connection))
    assert url is not None, "a Redis connection's asyncio factory needs its URL"
    return AsyncEventStreamClientFactory.from_url(scope, url)


def async_factories_of(request: pytest.FixtureRequest, connection: Connection) -> AsyncFactories:
    """:func:`async_factory_of` for ``connection``, the Redis URL taken from the suite's
    ``redis_url`` fixture (only when ``connection`` is not in memory)."""
    url = None if isinstance(connection, MemoryConnection) else request.getfixturevalue("redis_url")
    return functools.partial(async_factory_of, connection, url=url)
