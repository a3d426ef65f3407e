"""The asyncio reader behind the threaded reader's face, so the reader suites run on it too:
:class:`FlavouredFactory` creates threaded readers, asyncio readers (each in an event loop of
its own thread, its heartbeat and maintenance tasks running there all along, every call made
in that loop and waited for), or the two alternately (a mixed group)."""

from __future__ import annotations

import asyncio
import functools
import itertools
from typing import Any

from readergroup import EventStreamClientFactory
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from tests.support.async_adapter import LoopThread

READER_FLAVOURS = ("sync", "async", "mixed")


class BlockingAsyncReader:
    """An :class:`AsyncEventStreamReader` called from blocking code: every method runs in the
    reader's loop (coroutines awaited there), the caller waits for its result."""

    def __init__(self, url: str, scope: str, reader_id: str, group: str, *args: Any) -> None:
        self._loop = LoopThread()

        async def create() -> tuple[AsyncEventStreamClientFactory, AsyncEventStreamReader[Any]]:
            factory = AsyncEventStreamClientFactory.from_url(scope, url)
            return factory, await factory.create_reader(reader_id, group, *args)

        try:
            self._factory, self.target = self._loop.call(create())
        except BaseException:
            self._loop.stop()
            raise

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.target, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            async def run() -> Any:
                result = value(*args, **kwargs)
                return await result if asyncio.iscoroutine(result) else result

            return self._loop.call(run())

        return blocking

    def close(self, **kwargs: Any) -> None:
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.call(self.target.close(**kwargs))
            self._loop.call(self._factory.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> BlockingAsyncReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class FlavouredFactory:
    """``factory`` (threaded, on ``url``), whose ``create_reader`` makes readers of
    ``flavour``: ``sync``, ``async``, or ``mixed`` (async, sync, async, ...)."""

    def __init__(self, factory: EventStreamClientFactory, url: str, flavour: str) -> None:
        self._factory = factory
        self._url = url
        self._kinds = itertools.cycle(["async", "sync"] if flavour == "mixed" else [flavour])
        self.readers: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._factory, name)

    def create_reader(self, reader_id: str, group: str, *args: Any, **kwargs: Any) -> Any:
        if next(self._kinds) == "sync":
            return self._factory.create_reader(reader_id, group, *args, **kwargs)
        scope = self._factory.scope
        reader = BlockingAsyncReader(self._url, scope, reader_id, group, *args, **kwargs)
        self.readers.append(reader)
        return reader

    def close(self) -> None:
        for reader in self.readers:
            reader.close()
