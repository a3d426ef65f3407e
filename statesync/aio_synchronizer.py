"""The :class:`AsyncStateSynchronizer`: a :class:`~statesync.synchronizer.StateSynchronizer`
for asyncio code, on an :class:`~statesync.aio_backend.AsyncLogBackend`.

The asyncio shell around the synchronizer's core (:mod:`statesync.core`): the same decisions,
retries, conflict handling, wake-ups, compaction and errors as the threaded one, answered by
awaiting the backend (:func:`run_async`); backoffs await the event loop's
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
from collections.abc import Awaitable, Callable, Sequence
from contextlib import closing
from typing import Any, TypeVar, overload

from statesync.aio_backend import AsyncLogBackend
from statesync.backend import CompactOutcome
from statesync.clock import Clock
from statesync.requests import Operation, Sleep, Steps
from statesync.shell import SynchronizerShell
from statesync.system_clock import SystemClock
from statesync.update import Decision, Update

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


async def run_async(
    operation: Operation[T], backend: Any, sleep: Callable[[float], Awaitable[None]]
) -> T:
    """Drive ``operation`` to its end on an :class:`~statesync.aio_backend.AsyncLogBackend`.
    Cancelled while awaiting a request: the operation is closed where it stands."""
    steps = Steps(operation)
    with closing(operation):
        while (request := steps.next_request()) is not None:
            try:
                if isinstance(request, Sleep):
                    await sleep(request.seconds)
                else:
                    method = getattr(backend, request.method)
                    steps.reply = await method(*request.args, **request.kwargs)
            except Exception as exc:  # handed to the core, which decides what it means
                steps.error = exc
    return steps.result


def clock_sleep(clock: Clock) -> Callable[[float], Awaitable[None]]:
    """An awaitable backoff on ``clock``: the event loop's own sleep for the system clock, else
    the clock's ``sleep`` (a fake clock advances at once) and a yield to the loop."""
    if isinstance(clock, SystemClock):
        return asyncio.sleep

    async def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        await asyncio.sleep(0)

    return sleep


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
    def _backend_from_url(cls, url: str, options: dict[str, Any]) -> AsyncLogBackend:
        from statesync.aio_redis_backend import AsyncRedisLogBackend

        return AsyncRedisLogBackend.from_url(url, **options)

    async def _run(self, operation: Operation[T]) -> T:
        """Drive one of the core's operations, serialized with this instance's others."""
        async with self._lock:
            return await run_async(operation, self._backend, clock_sleep(self._core.clock))

    # -- operations -------------------------------------------------------------------------
    async def initialize(self, initial_state: S) -> bool:
        """As :meth:`~statesync.synchronizer.StateSynchronizer.initialize`: create the log with
        ``initial_state`` unless it exists, then load it; ``True`` if this call created it."""
        return await self._run(self._core.initialize(initial_state))

    async def fetch_updates(self) -> int:
        """As :meth:`~statesync.synchronizer.StateSynchronizer.fetch_updates`: apply every
        entry newer than :attr:`revision`; how many were applied. Cancelled: the replica keeps
        the entries applied so far, whole."""
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
        """As :meth:`~statesync.synchronizer.StateSynchronizer.update_state` (the same generator
        contract, fresh-state rule, ``fetched_at``, retries and errors): append
        ``generator(state)``'s updates, conditional on the log not having moved; the result of
        the run whose updates were appended.

        Cancelled while its append is in flight, the update may or may not have landed (as
        after a lost reply): the next fetch shows which; it never lands twice."""
        return await self._run(self._core.update_state(generator, fetched_at))

    async def update_state_unconditionally(self, updates: Sequence[Update]) -> int:
        """As :meth:`~statesync.synchronizer.StateSynchronizer.update_state_unconditionally`:
        append ``updates`` whatever the log's revision; the revision they landed at."""
        return await self._run(self._core.update_unconditionally(updates))

    async def compact(self, snapshot_fn: Callable[[S], S] | None = None) -> CompactOutcome:
        """As :meth:`~statesync.synchronizer.StateSynchronizer.compact`: snapshot the state at
        the head and truncate the log behind the previous snapshot."""
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
