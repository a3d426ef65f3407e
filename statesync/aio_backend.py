"""The storage protocol of an :class:`~statesync.aio_synchronizer.AsyncStateSynchronizer`:
:class:`~statesync.backend.LogBackend`'s contract, with coroutine methods.

Everything :mod:`statesync.backend` says holds word for word (atomic appends, conflicts,
keyed appends, writer-sequence idempotency, regressions, truncation, wake-ups); the records
exchanged are the same classes. Two implementations share their data with their blocking
twins, so threaded and asyncio synchronizers of one log interoperate:
:class:`~statesync.aio_redis_backend.AsyncRedisLogBackend` (``redis.asyncio``, same scripts
and keys as :class:`~statesync.redis_backend.RedisLogBackend`) and
:class:`~statesync.aio_memory_backend.AsyncMemoryLogBackend` (the logs of a
:class:`~statesync.memory_backend.MemoryLogBackend`).

Who may call what: the tasks of the event loop the backend was first used in. A call may be
cancelled at any await: it then either did nothing or did all of its work (each mutation is
one atomic script); an append whose reply was lost that way is found by the writer sequence
when re-sent (``DUPLICATE``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from statesync.backend import AppendOutcome, CompactOutcome, ReadResult


class AsyncLogBackend(Protocol):
    """:class:`~statesync.backend.LogBackend` with coroutine methods (see the module)."""

    async def initialize(self, name: str, snapshot: bytes, incarnation: str) -> bool:
        """Create the log with ``snapshot`` at revision 0; ``False`` if it already existed."""
        ...

    async def append(
        self,
        name: str,
        payload: bytes,
        *,
        expected_revision: int | None,
        writer: str,
        sequence: int,
        max_bytes: int,
        incarnation: str = "",
        anchor_revision: int = -1,
        anchor_history: str = "",
        wake: bool | Collection[str] = True,
        keys: Sequence[str] | None = None,
    ) -> AppendOutcome:
        """Append one entry (:meth:`statesync.backend.LogBackend.append`)."""
        ...

    async def wake(self, name: str, revision: int, followers: Collection[str] | None) -> bool:
        """Wake followers again (:meth:`statesync.backend.LogBackend.wake`)."""
        ...

    async def read(
        self,
        name: str,
        after_revision: int,
        limit: int,
        *,
        max_entry_bytes: int | None = None,
        max_snapshot_bytes: int | None = None,
    ) -> ReadResult:
        """One page of the log (:meth:`statesync.backend.LogBackend.read`)."""
        ...

    async def wait(
        self,
        name: str,
        after_revision: int,
        timeout: float,
        *,
        wakes_only: bool = False,
        follower: str | None = None,
    ) -> bool:
        """Until the log has an entry after ``after_revision`` (see
        :meth:`statesync.backend.LogBackend.wait`) or ``timeout`` passes, without blocking
        the event loop; cancellable."""
        ...

    async def compact(
        self,
        name: str,
        revision: int,
        snapshot: bytes,
        *,
        incarnation: str = "",
        history: str = "",
    ) -> CompactOutcome:
        """Store a snapshot (:meth:`statesync.backend.LogBackend.compact`)."""
        ...

    async def delete(self, name: str) -> bool:
        """Remove the log and everything of it; ``False`` if nothing existed."""
        ...

    async def server_time_ms(self) -> int:
        """The backend's clock, in milliseconds since the epoch."""
        ...

    async def close(self) -> None:
        """Release connections. Idempotent."""
        ...
