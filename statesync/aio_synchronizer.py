"""The :class:`AsyncStateSynchronizer`: a :class:`~statesync.synchronizer.StateSynchronizer`
for asyncio code, on an :class:`~statesync.aio_backend.AsyncLogBackend`.

The asyncio shell around the synchronizer's core (:mod:`statesync.core`): the same decisions,
retries, conflict handling, wake-ups, compaction and errors as the threaded one, answered by
awaiting the backend (:func:`statesync.requests.run_async`); backoffs await the event loop's
sleep (or advance an injected fake clock). Both shells speak the same wire format: a threaded
and an asyncio synchronizer of one log (on Redis, or on one
:class:`~statesync.memory_backend.MemoryLogBackend`) see each other's entries and conflict
with each other like two threaded ones.

Who may call what: the tasks of one event loop. Operations of one instance are serialized by
an :class:`asyncio.Lock`, except :meth:`AsyncStateSynchronizer.wait_for_updates`, which never
takes it (a task waiting does not hold up another task's update).

Cancellation: any operation may be cancelled at any await. The core changes the replica only
between awaits, so a cancelled call leaves the synchronizer usable and its replica a state the
log had (never half an entry). An ``update_state`` cancelled while its append was in flight
may or may not have landed, as after a lost reply: the next fetch shows which, a conditional
append after it is decided on the state that includes it (never applied twice), and the
writer sequence refuses the cancelled append if it reaches the server after a later append of
this writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, overload

from statesync.aio_backend import AsyncLogBackend
from statesync.backend import CompactOutcome
from statesync.config import SyncConfig
from statesync.requests import Operation, clock_sleep, run_async
from statesync.shell import SynchronizerShell, backend_options
from statesync.update import Decision, Update

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


class AsyncStateSynchronizer(SynchronizerShell[S, AsyncLogBackend]):
    """A replicated state whose history is an append-only log, for asyncio code.

    Example::

        sync = AsyncStateSynchronizer.from_url(url, "demo-counter", update_types=[Add])
        async with sync:
            await sync.initialize({"total": 0})
            await sync.update_state(lambda state: [Add(5)])
            assert sync.state["total"] >= 5

    Arguments as :class:`~statesync.synchronizer.StateSynchronizer`'s, with ``backend`` an
    :class:`~statesync.aio_backend.AsyncLogBackend`
    (:class:`~statesync.aio_redis_backend.AsyncRedisLogBackend`,
    :class:`~statesync.aio_memory_backend.AsyncMemoryLogBackend`). ``clock``: backoffs await
    ``asyncio.sleep`` on the system clock; on any other clock they call its ``sleep`` (a fake
    clock advances at once) and yield to the loop.
    """

    def _new_lock(self) -> asyncio.Lock:
        return asyncio.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        name: str,
        *,
        update_types: Iterable[type[Update]] = (),
        state_types: Iterable[type] = (),
        config: SyncConfig | None = None,
        **kwargs: Any,
    ) -> AsyncStateSynchronizer[Any]:
        """Connect to the Redis at ``url`` (``redis.asyncio``; see
        :meth:`AsyncRedisLogBackend.from_url
        <statesync.aio_redis_backend.AsyncRedisLogBackend.from_url>`) with a backend owned by
        the new synchronizer. Connects lazily: call it anywhere, use it in one event loop."""
        from statesync.aio_redis_backend import AsyncRedisLogBackend

        backend = AsyncRedisLogBackend.from_url(url, **backend_options(config))
        return cls(
            backend,
            name,
            update_types=update_types,
            state_types=state_types,
            config=config,
            close_backend=True,
            **kwargs,
        )

    async def _run(self, operation: Operation[T]) -> T:
        """Drive one of the core's operations, serialized with this instance's others."""
        async with self._lock:
            return await run_async(operation, self._backend, clock_sleep(self._core.clock))

    # -- operations -------------------------------------------------------------------------
    async def initialize(self, initial_state: S) -> bool:
        """Create the synchronizer with ``initial_state`` unless it exists, then load it.

        Idempotent: returns ``True`` if this call created it; ``False`` if it existed, in which
        case ``initial_state`` is ignored and the existing state is loaded.
        """
        return await self._run(self._core.initialize(initial_state))

    async def fetch_updates(self) -> int:
        """Apply every entry newer than :attr:`revision`; return how many were applied.

        Raises :class:`~statesync.errors.BadEntryError` at a bad entry (the state stays at the
        last good revision), :class:`~statesync.errors.SynchronizerNotFoundError` if the
        synchronizer does not exist, :class:`~statesync.errors.BackendUnavailableError`
        (retriable) if Redis cannot be reached.
        """
        return await self._run(self._core.fetch())

    # a list of updates: no result (listed first: a class may be both an Update and a Sequence)
    @overload
    async def update_state(
        self,
        generator: Callable[[S], Sequence[Update] | None],
        *,
        fetched_at: int | None = None,
    ) -> None: ...

    @overload
    async def update_state(
        self, generator: Callable[[S], Decision[R]], *, fetched_at: int | None = None
    ) -> R: ...

    async def update_state(
        self, generator: Callable[[S], Any], *, fetched_at: int | None = None
    ) -> Any:
        """Append ``generator(state)``'s updates, conditional on the log not having moved.

        ``generator`` must be pure: it may run several times, each time on a newer state. It
        returns a list of updates, or ``(updates, result)`` (a :data:`~statesync.Decision`);
        an empty list appends nothing. Returns ``result`` (``None`` if none) from the run whose
        updates were appended, typed as the generator's result.

        Every decision is made on fresh state: a run that appends nothing, or raises, counts
        only if its state was fetched during this call; otherwise the log is read first and,
        if it moved, the generator runs again on the newer state (so a stale handle cannot
        silently decide "nothing to do", nor refuse on a state that no longer holds).
        ``fetched_at``: the caller fetched (or appended) this replica at that revision during
        the same step, so a first run on a replica still there counts as fresh (no second
        read of the log just to confirm "nothing to do").

        Raises :class:`~statesync.errors.UpdateRejectedError` if an update's ``apply_to``
        raises on the current state (nothing appended),
        :class:`~statesync.errors.ConflictRetriesExhaustedError` if the retry budget ran out,
        :class:`~statesync.errors.BackendUnavailableError` if Redis stayed unreachable (the
        update may have landed; the state shows whether it did, it never lands twice).
        """
        return await self._run(self._core.update_state(generator, fetched_at))

    async def update_state_unconditionally(self, updates: Sequence[Update]) -> int:
        """Append ``updates`` whatever the log's revision; return the revision they landed at.

        The updates are first applied to the local state and rejected
        (:class:`~statesync.errors.UpdateRejectedError`) if that raises. A replica known to
        be stuck at a bad entry refuses before appending (the :class:`BadEntryError` says
        nothing was appended); one whose history is not the log's gets
        :class:`~statesync.errors.LogRegressedError`, nothing appended. When the updates
        landed but the replica cannot catch up to them (it meets a bad entry on the way), the
        call still returns their revision and :attr:`fetch_error` holds what stopped it.
        """
        return await self._run(self._core.update_unconditionally(updates))

    async def compact(self, snapshot_fn: Callable[[S], S] | None = None) -> CompactOutcome:
        """Snapshot the state at the current head and truncate the log behind the previous
        snapshot.

        ``snapshot_fn`` may return an equivalent, smaller state to store (for example without
        data no update will read again); this replica then adopts it, like every client that
        loads the snapshot. ``compacted`` is False if a snapshot at this revision or a newer one
        already existed.
        """
        return await self._run(self._core.compact(snapshot_fn))

    async def wait_for_updates(
        self, timeout: float, *, wakes_only: bool = False, follower: str | None = None
    ) -> bool:
        """Until the log has an entry newer than :attr:`revision`, up to ``timeout``
        seconds; ``True`` if there is one. Awaits the log itself (``XREAD BLOCK`` on a
        connection of its own; the memory backend's change signal), never sleep-polls nor
        blocks the event loop; cancellable at any point, leaving the synchronizer as it was.
        Does not apply anything: call :meth:`fetch_updates` next.
        ``wakes_only``: only an entry holding an update that wakes followers
        (:attr:`Update.wakes_followers`) counts: one whose wake-up is for every follower, or
        names ``follower`` (:meth:`Update.wakes`; without a ``follower``, named wake-ups do
        not count).
        """
        # not serialized: a wait must not hold up this instance's appends and fetches
        operation = self._core.wait(timeout, wakes_only, follower)
        return await run_async(operation, self._backend, clock_sleep(self._core.clock))

    async def resync(self) -> int:
        """Drop the local copy and load the log's state from scratch (after
        :class:`~statesync.errors.LogRegressedError`)."""
        return await self._run(self._core.resync())

    async def follow(self) -> int:
        """:meth:`fetch_updates` that adopts the log's state (:meth:`resync`, logged at
        WARNING) when it is not this replica's history any more, instead of raising."""
        return await self._run(self._core.follow())

    async def delete(self) -> bool:
        """Delete the synchronizer's log, snapshots and writer table for every client."""
        return await self._run(self._core.delete())

    async def close(self) -> None:
        """Release the backend if this synchronizer owns it. Idempotent."""
        if self._close_backend:
            await self._backend.close()

    async def __aenter__(self) -> AsyncStateSynchronizer[S]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
