"""The asyncio managers behind a blocking adapter, so one test body drives the threaded
managers or the asyncio ones (``flavour``), on either backend, the same way.

:func:`make_managers` gives ``(streams, groups)`` of ``flavour`` for a threaded ``connection``:
the threaded :class:`StreamManager` and :class:`ReaderGroupManager`, or
:class:`AsyncStreamManager` and :class:`AsyncReaderGroupManager` on the asyncio view of the
same memory or the same Redis, each coroutine method run on an event loop of its own thread
(:class:`~tests.support.async_adapter.LoopThread`) and waited for.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from readergroup import ReaderGroupManager, RetentionManager, StreamManager
from readergroup.aio.group_manager import AsyncReaderGroup, AsyncReaderGroupManager
from readergroup.aio.retention import AsyncRetentionManager
from readergroup.aio.stream_manager import AsyncStreamManager
from readergroup.storage.aio_admin import AsyncAdminConnection
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.connection_api import Connection
from readergroup.testing.aio_memory_admin import AsyncMemoryAdminConnection
from readergroup.testing.memory_connection import MemoryConnection
from tests.support.async_adapter import BlockingAsyncSynchronizer, LoopThread

FLAVOURS = ("threaded", "asyncio")


class Blocking(BlockingAsyncSynchronizer):
    """``target``'s coroutine methods as blocking calls on ``loop``, as the synchronizer
    adapter makes them; an :class:`AsyncReaderGroup` they return comes wrapped too."""

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)
        if not asyncio.iscoroutinefunction(getattr(self.target, name)):
            return value

        @functools.wraps(value)
        def wrapping(*args: Any, **kwargs: Any) -> Any:
            result = value(*args, **kwargs)
            return Blocking(result, self._loop) if isinstance(result, AsyncReaderGroup) else result

        return wrapping


def async_admin(connection: Connection, url: str | None) -> Any:
    """The asyncio managers' connection to what ``connection`` reaches."""
    if isinstance(connection, MemoryConnection):
        return AsyncMemoryAdminConnection(connection)
    assert url is not None
    return AsyncAdminConnection(AsyncConnection.from_url(url, connection.config))


def make_managers(
    flavour: str,
    connection: Connection,
    scope: str,
    url: str | None,
    closers: list[Callable[[], None]],
) -> tuple[Any, Any]:
    """``(stream manager, reader group manager of scope)`` of ``flavour``; ``closers`` gets
    what stops an asyncio pair's loop and connection (the caller runs them at teardown)."""
    if flavour == "threaded":
        return StreamManager(connection), ReaderGroupManager(scope, connection)
    loop = LoopThread()
    admin = async_admin(connection, url)

    async def close() -> None:
        await admin.close()
        inner = getattr(admin, "connection", None)
        if inner is not None:
            await inner.close()

    closers.append(loop.stop)
    closers.append(lambda: loop.call(close()))
    streams = Blocking(AsyncStreamManager(admin), loop)
    groups = Blocking(AsyncReaderGroupManager(scope, admin), loop)
    return streams, groups


def retention_of(streams: Any) -> Any:
    """The retention manager of ``streams``' flavour (an asyncio one behind the adapter)."""
    if isinstance(streams, Blocking):
        return Blocking(AsyncRetentionManager(streams.target), streams._loop)
    return RetentionManager(streams)
