"""An asyncio face of :class:`~statesync.memory_backend.MemoryLogBackend`: the same logs.

Every call but ``wait`` is the blocking backend's (in-memory, it never blocks: it takes a lock
for microseconds). ``wait`` never blocks the event loop: it watches the logs
(:meth:`MemoryLogBackend.watching`) and awaits the change the watcher hands to the loop from
whichever thread made it (:func:`~statesync.watched_condition.wait_for_news`). So a threaded
and an asyncio synchronizer of one process share a log by sharing the
:class:`MemoryLogBackend` (:attr:`AsyncMemoryLogBackend.logs`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from statesync.backend import AppendOutcome, CompactOutcome, ReadResult
from statesync.memory_backend import MemoryLogBackend
from statesync.watched_condition import wait_for_news


class AsyncMemoryLogBackend:
    """:class:`~statesync.aio_backend.AsyncLogBackend` over a :class:`MemoryLogBackend`'s
    logs (a new one unless ``logs`` is given; ``server_clock`` as there)."""

    def __init__(
        self,
        logs: MemoryLogBackend | None = None,
        *,
        server_clock: Callable[[], int] | None = None,
    ) -> None:
        self._logs = logs if logs is not None else MemoryLogBackend(server_clock)

    @property
    def logs(self) -> MemoryLogBackend:
        """The blocking backend holding the logs (give it to a :class:`StateSynchronizer`)."""
        return self._logs

    async def initialize(self, name: str, snapshot: bytes, incarnation: str) -> bool:
        return self._logs.initialize(name, snapshot, incarnation)

    async def append(self, name: str, payload: bytes, **options: Any) -> AppendOutcome:
        return self._logs.append(name, payload, **options)

    async def wake(self, name: str, revision: int, followers: Collection[str] | None) -> bool:
        return self._logs.wake(name, revision, followers)

    async def read(self, name: str, after_revision: int, limit: int, **limits: Any) -> ReadResult:
        return self._logs.read(name, after_revision, limit, **limits)

    async def wait(self, name: str, after_revision: int, timeout: float, **which: Any) -> bool:
        def has_news() -> bool:
            return self._logs.newest(name, **which) > after_revision

        return await wait_for_news(self._logs.watching, has_news, timeout)

    async def compact(
        self, name: str, revision: int, snapshot: bytes, **anchors: Any
    ) -> CompactOutcome:
        return self._logs.compact(name, revision, snapshot, **anchors)

    async def delete(self, name: str) -> bool:
        return self._logs.delete(name)

    async def server_time_ms(self) -> int:
        return self._logs.server_time_ms()

    async def close(self) -> None:
        """Nothing to release."""
