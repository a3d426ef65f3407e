"""The asyncio reader behind the threaded reader's face, so the reader suites run on it too
(the tooz way: the same test functions, once per reader flavour).

:class:`FlavouredFactory` creates threaded readers, asyncio readers (each in an event loop of
its own thread, its heartbeat and maintenance tasks running there all along, every call made
in that loop and waited for), or the two alternately (a mixed group).

Rebalance listeners keep the threaded reader's contract: a plain listener given to an asyncio
reader is called on the thread that made the read (or close) call, inside that call, while the
call waits in the loop; what that listener calls on the reader (``commit()``, ``seek()``) is
run by the very task that awaits the listener (so the reader's task-re-entrant group lock lets
a commit in ``on_segments_released`` of ``close()`` land, as an asyncio application's own
``await reader.commit()`` in its coroutine listener would).

A suite opts in with :func:`flavoured` (its tests on ``connection``, memory and Redis) or
:func:`flavoured_on_redis` (tests that take ``redis_url``); its ``factory`` fixture made by
:func:`flavoured_factory`, or its direct factories by the ``open_factory`` fixture
(:func:`open_factory_fixture`); the ``reader_flavour`` fixture (:func:`reader_flavour_fixture`)
imported.
:data:`ASYNC_BACKENDS` says on which connections asyncio readers run (both: the memory
backend has asyncio readers too).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from readergroup import EventStreamClientFactory
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from readergroup.storage.connection_api import Connection
from tests.support.aio_backends import AsyncFactories, async_factories_of
from tests.support.async_adapter import LoopThread

READER_FLAVOURS = ("sync", "async", "mixed")
BACKENDS = ("memory", "redis")
ASYNC_BACKENDS: tuple[str, ...] = ("memory", "redis")
"""The connections the suites run asyncio readers on (the ``async`` and ``mixed`` flavours)."""

PLAIN = (int, float, str, bytes, bool, type(None), dict, list, set, frozenset, tuple)


# -- flavours of a suite's tests ------------------------------------------------------------------
def flavour_params(
    flavours: tuple[str, ...] = READER_FLAVOURS,
    backends: tuple[str, ...] = BACKENDS,
    long: tuple[str, ...] = (),
) -> list[Any]:
    """``(connection, flavour)`` params: every backend with threaded readers (ids ``memory``,
    ``redis``: the suites' ids as before), the :data:`ASYNC_BACKENDS` ones with the other
    ``flavours`` too (ids ``redis-async``, ``redis-mixed``); those of ``long`` flavours
    marked ``long`` (``make test-long``)."""
    return [
        pytest.param(
            backend,
            flavour,
            id=backend if flavour == "sync" else f"{backend}-{flavour}",
            marks=[pytest.mark.long] if flavour in long else [],
        )
        for backend in backends
        for flavour in flavours
        if flavour == "sync" or backend in ASYNC_BACKENDS
    ]


def flavoured(
    *flavours: str, backends: tuple[str, ...] = BACKENDS, long: tuple[str, ...] = ()
) -> pytest.MarkDecorator:
    """Run a test on ``connection`` once per backend and reader flavour (default: threaded,
    asyncio, mixed; a test with one reader has no mixed group: ``flavoured("sync",
    "async")``; ``long``: flavours that run in ``make test-long`` only). Its ``factory`` must
    come from :func:`flavoured_factory`."""
    chosen = flavours or READER_FLAVOURS
    return pytest.mark.parametrize(
        ("connection", "reader_flavour"),
        flavour_params(chosen, backends, long),
        indirect=True,
    )


def flavoured_on_redis(*flavours: str, long: tuple[str, ...] = ()) -> pytest.MarkDecorator:
    """Run a test that takes ``redis_url`` once per reader flavour (it makes its factories
    with the ``open_factory`` fixture, or its ``factory`` fixture with
    :func:`flavoured_factory`)."""
    chosen = flavours or READER_FLAVOURS
    assert "redis" in ASYNC_BACKENDS
    params = [pytest.param(f, marks=[pytest.mark.long] if f in long else []) for f in chosen]
    return pytest.mark.parametrize("reader_flavour", params, indirect=True)


@pytest.fixture(name="reader_flavour")
def reader_flavour_fixture(request: pytest.FixtureRequest) -> str:
    """Which readers the test's factories make: ``sync`` (threaded) unless the test is
    :func:`flavoured`. (A suite module imports this fixture.)"""
    flavour: str = getattr(request, "param", "sync")
    return flavour


def flavoured_factory(
    connection: Connection, scope: str, flavour: str, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """A suite's ``factory`` fixture: a client factory for ``scope`` on ``connection`` whose
    readers are of ``flavour``; a flavour other than ``sync`` must have made an asyncio
    reader by the test's end."""
    with EventStreamClientFactory(scope, connection) as threaded:
        if flavour == "sync":
            yield threaded
            return
        made = FlavouredFactory(threaded, async_factories_of(request, connection), flavour)
        try:
            yield made
        finally:
            made.close()
        assert made.asked, f"the test asked for no asyncio reader ({flavour})"


@pytest.fixture(name="open_factory")
def open_factory_fixture(reader_flavour: str) -> Iterator[Callable[..., Any]]:
    """For suites that open factories on a URL themselves: ``open_factory(scope, url)`` is
    ``EventStreamClientFactory.from_url(scope, url)`` whose readers are of the test's
    ``reader_flavour`` (a context manager, as the factory is)."""
    made: list[FlavouredFactory] = []

    @contextlib.contextmanager
    def open_one(scope: str, url: str, *args: Any) -> Iterator[Any]:
        with EventStreamClientFactory.from_url(scope, url, *args) as threaded:
            if reader_flavour == "sync":
                yield threaded
                return
            flavoured_one = FlavouredFactory(threaded, url, reader_flavour)
            made.append(flavoured_one)
            try:
                yield flavoured_one
            finally:
                flavoured_one.close()

    yield open_one
    if reader_flavour != "sync":
        assert any(f.asked for f in made), (
            f"the test asked for no asyncio reader ({reader_flavour})"
        )


@pytest.fixture(name="factory")
def url_factory_fixture(scope: str, redis_url: str, open_factory: Any) -> Iterator[Any]:
    """The conftest's ``factory`` (the scope's client factory on the test's Redis URL), its
    readers of the test's ``reader_flavour`` (a suite module imports this fixture)."""
    with open_factory(scope, redis_url) as made:
        yield made


# -- blocking calls into a reader's loop --------------------------------------------------------
@dataclass
class Finished:
    """A call's outcome, for the thread waiting for it."""

    result: Any = None
    error: BaseException | None = None

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


@dataclass
class Caller:
    """A blocking thread waiting for one call into a loop; meanwhile it runs the listener
    methods the call hands it (:class:`ListenerJob`), on that thread."""

    inbox: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    lock: threading.Lock = field(default_factory=threading.Lock)
    waiting: bool = True

    def hand(self, job: ListenerJob) -> bool:
        """Give ``job`` to this thread; ``False`` if its call is over (nobody waits)."""
        with self.lock:
            if self.waiting:
                self.inbox.put(job)
            return self.waiting

    def finish(self, outcome: Finished) -> None:
        self.inbox.put(outcome)

    def wait(self) -> Any:
        while True:
            item = self.inbox.get()
            if isinstance(item, Finished):
                with self.lock:
                    self.waiting = False
                while not self.inbox.empty():  # handed before the call ended
                    self.inbox.get().run()
                return item.unwrap()
            item.run()


CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("caller", default=None)
"""The blocking caller the running task's call came from."""

_SERVING = threading.local()
"""``.channels``: the listener tasks this thread runs a listener method for (innermost last):
a call made there is run by that task."""


@dataclass
class NestedCall:
    """A call a listener method makes on the reader, for the task awaiting that listener."""

    make: Callable[[], Any]
    caller: Caller


async def run_call(make: Callable[[], Any], caller: Caller) -> None:
    """Run ``make()`` (awaiting a coroutine it returns) for ``caller``, in the running task."""
    token = CALLER.set(caller)
    try:
        result = make()
        if asyncio.iscoroutine(result):
            result = await result
    except BaseException as exc:
        caller.finish(Finished(error=exc))
        if isinstance(exc, asyncio.CancelledError):
            raise
    else:
        caller.finish(Finished(result))
    finally:
        CALLER.reset(token)


def blocking_call(loop: LoopThread, make: Callable[[], Any]) -> Any:
    """``make()`` run in ``loop`` (a coroutine it returns awaited there), for this thread,
    which waits for it: in a task of its own, or, when this thread runs a listener method,
    in the task awaiting that listener."""
    caller = Caller()
    channels: list[asyncio.Queue[Any]] = getattr(_SERVING, "channels", [])
    if channels:
        loop.loop.call_soon_threadsafe(channels[-1].put_nowait, NestedCall(make, caller))
    else:
        asyncio.run_coroutine_threadsafe(run_call(make, caller), loop.loop)
    return caller.wait()


@dataclass
class ListenerJob:
    """One listener method call, run on the blocking caller's thread; its outcome goes back
    to the listener task's ``channel``."""

    method: Callable[..., Any]
    args: tuple[Any, ...]
    channel: asyncio.Queue[Any]
    loop: asyncio.AbstractEventLoop

    def run(self) -> None:
        channels = _SERVING.__dict__.setdefault("channels", [])
        channels.append(self.channel)
        try:
            outcome = Finished(self.method(*self.args))
        except BaseException as exc:
            outcome = Finished(error=exc)
        finally:
            channels.pop()
        self.loop.call_soon_threadsafe(self.channel.put_nowait, outcome)


async def on_caller_thread(method: Callable[..., Any], *args: Any) -> Any:
    """Await ``method(*args)`` run on the thread whose call the running task serves; run the
    calls it makes on the reader meanwhile, in this task. Outside any call (a background
    task), in a worker thread."""
    caller = CALLER.get()
    channel: asyncio.Queue[Any] = asyncio.Queue()
    job = ListenerJob(method, args, channel, asyncio.get_running_loop())
    if caller is None or not caller.hand(job):
        return await asyncio.to_thread(method, *args)
    while True:
        item = await channel.get()
        if isinstance(item, Finished):
            return item.unwrap()
        await run_call(item.make, item.caller)


class ThreadedListener:
    """A plain (threaded-reader) rebalance listener given to an asyncio reader: each method a
    coroutine running the listener's own on the reading thread (:func:`on_caller_thread`)."""

    def __init__(self, listener: Any) -> None:
        self._listener = listener

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._listener, name)  # AttributeError: the listener lacks it

        async def on_reading_thread(*args: Any) -> Any:
            return await on_caller_thread(method, *args)

        return on_reading_thread


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
        return blocking_call(loop, lambda: value(*args, **kwargs))

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
    reader's loop (coroutines awaited there), the caller waits for its result; plain
    rebalance listeners run on the calling thread (see the module doc). ``target``: the Redis
    URL, or what makes the asyncio factory of a scope (the memory backend's: see
    :func:`tests.support.aio_backends.async_factories_of`)."""

    def __init__(
        self,
        target: str | AsyncFactories,
        scope: str,
        reader_id: str,
        group: str,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        self._loop = LoopThread()
        factory_of = (
            functools.partial(AsyncEventStreamClientFactory.from_url, url=target)
            if isinstance(target, str)
            else target
        )

        async def create() -> tuple[AsyncEventStreamClientFactory, AsyncEventStreamReader[Any]]:
            factory = factory_of(scope)
            try:
                return factory, await factory.create_reader(reader_id, group, *args, **kwargs)
            except BaseException:
                await factory.close()
                raise

        try:
            self._factory, self.target = self.call(create)
        except BaseException:
            self._loop.stop()
            raise

    def call(self, make: Callable[[], Awaitable[Any] | Any]) -> Any:
        """``make()`` run in the reader's loop, awaited there; its result."""
        return blocking_call(self._loop, make)

    def __getattr__(self, name: str) -> Any:
        return in_loop(getattr(self.target, name), self._loop)

    def add_rebalance_listener(self, listener: Any) -> None:
        methods = ("on_segments_acquired", "on_segments_released", "on_segments_lost")
        plain = not any(asyncio.iscoroutinefunction(getattr(listener, m, None)) for m in methods)
        wrapped = ThreadedListener(listener) if plain else listener
        self.call(lambda: self.target.add_rebalance_listener(wrapped))

    def __iter__(self) -> Iterator[Any]:
        """``for event in reader``: the asyncio reader's ``async for``, each step awaited in
        its loop."""
        events = self.target.__aiter__()
        while True:
            try:
                yield self.call(events.__anext__)
            except StopAsyncIteration:
                return

    def run(
        self, handler: Callable[[Any], Any], *, stop: threading.Event | None = None, **_: Any
    ) -> None:
        """The threaded reader's ``run()`` on the asyncio reader: ``async for event in
        reader`` (which rejoins by itself once fenced), each event handled on this thread,
        until ``stop`` is set (then :meth:`stop_iteration`). The threaded ``run``'s options
        (workers, signals) have no asyncio counterpart and are left out."""
        target = self.target

        async def watch() -> None:
            while stop is not None and not stop.is_set():
                await asyncio.sleep(0.02)
            target.stop_iteration()

        async def iterate() -> None:
            watcher = asyncio.ensure_future(watch())
            try:
                async for event in target:
                    if event.is_event:
                        await on_caller_thread(handler, event)
            finally:
                watcher.cancel()

        self.call(iterate)

    def close(self, **kwargs: Any) -> None:
        """The reader's ``close`` (its member stays usable, as a threaded reader's does, until
        :meth:`shut_down`)."""
        if not self._loop.loop.is_closed():
            self.call(lambda: self.target.close(**kwargs))

    def shut_down(self) -> None:
        """Close the reader, then its factory; stop its loop."""
        if self._loop.loop.is_closed():
            return
        try:
            self.close()
            self.call(self._factory.close)
        finally:
            self._loop.stop()

    def __enter__(self) -> BlockingAsyncReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class FlavouredFactory:
    """``factory`` (threaded), whose ``create_reader`` makes readers of ``flavour``: ``sync``,
    ``async``, or ``mixed`` (async, sync, async, ...); the asyncio ones on ``target`` (as
    :class:`BlockingAsyncReader`'s)."""

    def __init__(
        self, factory: EventStreamClientFactory, target: str | AsyncFactories, flavour: str
    ) -> None:
        self._factory = factory
        self._target = target
        self._kinds = itertools.cycle(["async", "sync"] if flavour == "mixed" else [flavour])
        self.readers: list[Any] = []
        self.asked = 0
        """How many asyncio readers a test asked for (a flavoured test that asked for none
        tested nothing of them)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._factory, name)

    def create_reader(self, reader_id: str, group: str, *args: Any, **kwargs: Any) -> Any:
        if next(self._kinds) == "sync":
            return self._factory.create_reader(reader_id, group, *args, **kwargs)
        self.asked += 1
        scope = self._factory.scope
        reader = BlockingAsyncReader(self._target, scope, reader_id, group, *args, **kwargs)
        self.readers.append(reader)
        return reader

    def close(self) -> None:
        """Shut every asyncio reader made here down (closed, its factory closed, its loop
        stopped), even if one fails; raise the first failure."""
        failure: BaseException | None = None
        for reader in self.readers:
            try:
                reader.shut_down()
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
