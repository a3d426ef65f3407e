"""The synchronizer suite run on the asyncio synchronizer too (tooz model: one suite,
parametrized over sync/async x backend).

:func:`make_synchronizer` gives, for a blocking :class:`~statesync.backend.LogBackend` (the
suite's ``backend`` fixture), a :class:`StateSynchronizer` or an :class:`AsyncStateSynchronizer`
on that backend's async twin (the same in-memory logs; the same Redis) behind a blocking
adapter: each asyncio synchronizer runs in an event loop of its own thread, and the adapter
turns each coroutine method into a call that waits for it. A test then calls either one the
same way; the suite's other synchronizers, threads and direct backend calls see the asyncio
one through the shared log.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from statesync import AsyncMemoryLogBackend, AsyncStateSynchronizer, MemoryLogBackend
from statesync.aio_backend import AsyncLogBackend
from statesync.aio_redis_backend import AsyncRedisLogBackend
from statesync.backend import LogBackend
from statesync.redis_backend import RedisLogBackend
from statesync.synchronizer import StateSynchronizer

FLAVOURS = ("sync", "async")


class LoopThread:
    """An event loop running forever in a daemon thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` in the loop; its result (or exception), once it finished."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class BlockingAsyncSynchronizer:
    """An :class:`AsyncStateSynchronizer` called from blocking code: its coroutine methods
    become calls that wait for them (on the synchronizer's own loop); everything else (the
    ``state``, ``revision``, ``stats`` properties) is the synchronizer's own."""

    def __init__(self, target: AsyncStateSynchronizer[Any], loop: LoopThread) -> None:
        self.target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.target, name)
        if not asyncio.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._loop.call(value(*args, **kwargs))

        return blocking

    def close(self) -> None:
        self._loop.call(self.target.backend.close())
        self._loop.stop()


def async_twin(backend: LogBackend) -> AsyncLogBackend:
    """An async backend on ``backend``'s logs: the same in-memory store, or the same Redis."""
    if isinstance(backend, MemoryLogBackend):
        return AsyncMemoryLogBackend(backend)
    if isinstance(backend, RedisLogBackend):
        kwargs = backend.client.connection_pool.connection_kwargs
        url = f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
        return AsyncRedisLogBackend.from_url(url, key_prefix=backend.key_prefix)
    raise TypeError(f"no async twin for {type(backend).__name__}")


def make_synchronizer(
    flavour: str,
    backend: LogBackend,
    name: str,
    closers: list[Callable[[], None]],
    **kwargs: Any,
) -> Any:
    """A synchronizer of ``flavour`` (``sync``/``async``) on ``backend``'s logs; an async one
    is closed (its loop stopped) by ``closers``, which the caller runs at teardown."""
    if flavour == "sync":
        return StateSynchronizer(backend, name, **kwargs)
    loop = LoopThread()
    adapter = BlockingAsyncSynchronizer(
        AsyncStateSynchronizer(async_twin(backend), name, **kwargs), loop
    )
    closers.append(adapter.close)
    return adapter


_FLAVOUR = ["sync"]
_CLOSERS: list[Callable[[], None]] = []


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> Iterator[str]:
    """Which synchronizer :func:`make_flavoured` makes in this test: the threaded one, or the
    asyncio one behind a blocking adapter (a module imports this fixture and uses it on every
    test: ``pytestmark = pytest.mark.usefixtures("flavour")``)."""
    _FLAVOUR[0] = request.param
    yield request.param
    while _CLOSERS:
        _CLOSERS.pop()()


def make_flavoured(backend: LogBackend, name: str, **kwargs: Any) -> Any:
    """A synchronizer of the running test's :func:`flavour` on ``backend``'s logs."""
    return make_synchronizer(_FLAVOUR[0], backend, name, _CLOSERS, **kwargs)
