"""The asyncio reader behind the threaded reader's face, so the reader suites run on it too:
:class:`FlavouredFactory` creates threaded readers, asyncio readers (each in an event loop of
its own thread, its heartbeat and maintenance tasks running there all along, every call made
in that loop and waited for), or the two alternately (a mixed group)."""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable
from typing import Any

from readergroup import EventStreamClientFactory
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from tests.support.async_adapter import LoopThread

READER_FLAVOURS = ("sync", "async", "mixed")


PLAIN = (int, float, str, bytes, bool, type(None), dict, list, set, frozenset, tuple)


def in_loop(value: Any, loop: LoopThread) -> Any:
    """``value`` for blocking code: a method runs in ``loop`` (a coroutine it returns awaited
    there); an object with coroutine methods (the reader's member, its stop event) is wrapped
    the same way; anything else as it is."""
    if isinstance(value, PLAIN):
        return value
    if not callable(value):
        kind = type(value)
        awaits = any(asyncio.iscoroutinefunction(getattr(kind, n, None)) for n in dir(kind))
        return LoopProxy(value, loop) if awaits else value

    @functools.wraps(value)
    def blocking(*args: Any, **kwargs: Any) -> Any:
        async def run() -> Any:
            result = value(*args, **kwargs)
            return await result if asyncio.iscoroutine(result) else result

        return loop.call(run())

    return blocking


class LoopProxy:
    """An object of an asyncio reader, every use of it made in the reader's loop."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        return in_loop(getattr(self._target, name), self._loop)


class BlockingAsyncReader:
    """An :class:`AsyncEventStreamReader` called from blocking code: every method runs in the
    reader's loop (coroutines awaited there), the caller waits for its result. ``url``: the
    Redis URL, or what makes the asyncio factory of a scope (the memory backend's: see
    :mod:`tests.support.aio_backends`)."""

    def __init__(
        self,
        url: str | Callable[[str], AsyncEventStreamClientFactory],
        scope: str,
        reader_id: str,
        group: str,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        self._loop = LoopThread()

        async def create() -> tuple[AsyncEventStreamClientFactory, AsyncEventStreamReader[Any]]:
            factory = (
                AsyncEventStreamClientFactory.from_url(scope, url)
                if isinstance(url, str)
                else url(scope)
            )
            return factory, await factory.create_reader(reader_id, group, *args, **kwargs)

        try:
            self._factory, self.target = self._loop.call(create())
        except BaseException:
            self._loop.stop()
            raise

    def __getattr__(self, name: str) -> Any:
        return in_loop(getattr(self.target, name), self._loop)

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
    ``flavour``: ``sync``, ``async``, or ``mixed`` (async, sync, async, ...). ``url`` as
    :class:`BlockingAsyncReader`'s."""

    def __init__(
        self,
        factory: EventStreamClientFactory,
        url: str | Callable[[str], AsyncEventStreamClientFactory],
        flavour: str,
    ) -> None:
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
