"""In-memory change signals that asyncio code can await: :class:`WatchedCondition`, a
:class:`threading.Condition` whose :meth:`~WatchedCondition.notify_all` also calls the watchers
registered with :meth:`~WatchedCondition.watching`, and :func:`wait_for_news`, which awaits a
change without blocking the event loop (a watcher hands the change to the loop with
``call_soon_threadsafe``). So threads that change in-memory data (a log, a segment) wake both the
threads waiting on the condition and the tasks of any event loop, never polling."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar

T = TypeVar("T")

Watching = Callable[[Callable[[], None]], AbstractContextManager[None]]
"""What :func:`wait_for_news` watches changes with (:meth:`WatchedCondition.watching`)."""


class WatchedCondition(threading.Condition):
    """A condition variable that also calls its watchers on :meth:`notify_all`."""

    def __init__(self) -> None:
        super().__init__()
        self._watchers: list[Callable[[], None]] = []

    @contextlib.contextmanager
    def watching(self, watcher: Callable[[], None]) -> Iterator[None]:
        """Call ``watcher`` after every :meth:`notify_all` while the block runs (with the lock
        held, from whichever thread notified: it must only schedule, never block)."""
        with self:
            self._watchers.append(watcher)
        try:
            yield
        finally:
            with self:
                self._watchers.remove(watcher)

    def notify_all(self) -> None:
        super().notify_all()
        for watcher in self._watchers:
            watcher()


async def wait_for_news(watching: Watching, look: Callable[[], T], timeout: float) -> T:
    """``look()`` once it is truthy, or its last answer after ``timeout`` s: looked at again
    after each change ``watching`` reports, awaited on the running loop (never blocking it)."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()

    def watcher() -> None:  # any thread, with the watched lock held: only schedule
        with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile: nobody waits)
            loop.call_soon_threadsafe(changed.set)

    deadline = loop.time() + timeout
    with watching(watcher):
        while True:
            changed.clear()  # before looking: a change after the look sets it again
            found = look()
            remaining = deadline - loop.time()
            if found or remaining <= 0:
                return found
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return look()
