"""The transactional writer suite run on the asyncio writer too (tooz model: one suite,
parametrized over the threaded and the asyncio writer).

The :func:`txn_factory` fixture is, per flavour, the test's threaded
:class:`~readergroup.EventStreamClientFactory` or a :class:`BlockingAsyncTxnFactory`: an
:class:`~readergroup.aio.AsyncEventStreamClientFactory` on the same Redis and scope, in an event
loop of its own thread, whose ``create_transactional_writer`` gives an
:class:`~readergroup.aio.transactions.AsyncTransactionalEventStreamWriter` behind a blocking
adapter (:class:`Blocking`: each coroutine method becomes a call that waits for it; the
writer's transactions, store and completer are adapted the same way). A test then drives
either one the same way; the rest of the suite (batch reads, plain writers, managers) is
threaded and sees the asyncio writer's work through Redis.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import pytest

from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from readergroup.aio.transactions import (
    AsyncClaimer,
    AsyncTransaction,
    AsyncTransactionalEventStreamWriter,
    AsyncTxnCompleter,
    BeginTransaction,
)
from readergroup.storage.aio_calls import drive_async
from readergroup.storage.aio_txn_store import AsyncTxnStore
from tests.support.async_adapter import LoopThread

FLAVOURS = ("threaded", "asyncio")
_ADAPTED = (
    AsyncTransactionalEventStreamWriter,
    AsyncTransaction,
    AsyncTxnStore,
    AsyncTxnCompleter,
    AsyncEventStreamReader,
    AsyncClaimer,
    asyncio.Event,
)


class Blocking:
    """An asyncio object called from blocking code: every method runs in ``loop`` (the
    object's own: readers and writers of one factory share it), the caller waiting for it,
    coroutines (and awaitables such as ``writer.begin()``'s) awaited there; the asyncio
    objects they return, or that attributes hold, are adapted too; adapted arguments are
    passed as their targets; everything else is the target's own. Setting an attribute sets
    it on the target (a test hook such as ``completer.after_entry``, a monkeypatched store
    method: a plain function raising is called by the asyncio driver as is; restoring the
    adapter's own wrapper drops the patch)."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "_loop", loop)

    def _adapt(self, value: Any) -> Any:
        if isinstance(value, BeginTransaction):
            value = self._loop.call(_awaited(value))
        return Blocking(value, self._loop) if isinstance(value, _ADAPTED) else value

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.target, name)
        if isinstance(value, _ADAPTED):
            return Blocking(value, self._loop)
        if not callable(value) or getattr(value, "_blocking_adapter", False):
            return value

        @functools.wraps(value)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            plain = [unwrapped(a) for a in args]
            named = {k: unwrapped(v) for k, v in kwargs.items()}

            async def in_loop() -> Any:
                result = value(*plain, **named)
                return await result if asyncio.iscoroutine(result) else result

            return self._adapt(self._loop.call(in_loop()))

        blocking._blocking_adapter = True  # type: ignore[attr-defined]
        return blocking

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(value, "_blocking_adapter", False):  # monkeypatch undoing: drop the patch
            self.target.__dict__.pop(name, None)
        else:
            setattr(self.target, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.target, name)

    def __repr__(self) -> str:
        return f"Blocking({self.target!r})"

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        """An asyncio transaction's ``async with`` exit (what ``BeginTransaction`` runs)."""
        self._loop.call(drive_async(self.target.exit_steps(failed=kind is not None)))


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def unwrapped(value: Any) -> Any:
    """The asyncio object behind a :class:`Blocking` adapter (its methods are coroutine
    functions, to patch with coroutine functions), or ``value`` itself (a threaded one)."""
    return value.target if isinstance(value, Blocking) else value


class BlockingAsyncTxnFactory:
    """An asyncio factory of the test's scope on its own loop, creating asyncio transactional
    writers behind :class:`Blocking` adapters."""

    def __init__(self, scope: str, redis_url: str) -> None:
        self.loop = LoopThread()
        self.scope = scope

        async def make() -> AsyncEventStreamClientFactory:
            return AsyncEventStreamClientFactory.from_url(scope, redis_url)

        self.target: AsyncEventStreamClientFactory = self.loop.call(make())

    def create_transactional_writer(self, *args: Any, **kwargs: Any) -> Any:
        writer = self.loop.call(self.target.create_transactional_writer(*args, **kwargs))
        return Blocking(writer, self.loop)

    def create_reader(self, *args: Any, **kwargs: Any) -> Any:
        """An asyncio reader in this factory's loop (so its writers' listeners run there)."""
        return Blocking(self.loop.call(self.target.create_reader(*args, **kwargs)), self.loop)

    def __enter__(self) -> BlockingAsyncTxnFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.loop.call(self.target.close())
        self.loop.stop()


def flavoured_txn_factory(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The body of a module's ``txn_factory`` fixture (``params=FLAVOURS``): what creates its
    transactional writers, the threaded factory (the ``factory`` fixture) or an asyncio one
    behind a blocking adapter, on the test's scope."""
    if request.param == "threaded":
        yield request.getfixturevalue("factory")
        return
    scope, url = request.getfixturevalue("scope"), request.getfixturevalue("redis_url")
    adapter = BlockingAsyncTxnFactory(scope, url)
    try:
        yield adapter
    finally:
        adapter.close()


def another_txn_factory(txn_factory: Any, scope: str, redis_url: str) -> Any:
    """A second factory of ``txn_factory``'s flavour (another process's), as a context
    manager."""
    if isinstance(txn_factory, BlockingAsyncTxnFactory):
        return BlockingAsyncTxnFactory(scope, redis_url)
    from readergroup import EventStreamClientFactory

    return EventStreamClientFactory.from_url(scope, redis_url)


def claimer_of(writer: Any, reader: Any) -> Any:
    """The rebalance listener ``writer.bind_reader(reader)`` installed (adapted)."""
    claimer = unwrapped(writer)._claimers[id(unwrapped(reader))]
    return Blocking(claimer, writer._loop) if isinstance(writer, Blocking) else claimer
