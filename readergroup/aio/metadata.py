"""Stream metadata for the asyncio writer, never blocking the event loop.

:class:`AsyncStreamMetadataCache` makes the threaded cache's decisions
(:class:`~readergroup.client.metadata_cache.FreshStates`: trust a fetched state for
``ClientConfig.metadata_ttl`` seconds, fetch at once after a sealed-segment error) over an
:class:`AsyncStreamStates` source.

The source, :class:`SynchronizedStreamStates`, keeps one
:class:`~statesync.AsyncStateSynchronizer` per stream, as the threaded cache keeps one
:class:`~statesync.StateSynchronizer`, and fetches it the same way
(:func:`~readergroup.client.metadata_cache.fetch_stream_state`): each refresh reads only the
entries after those it has, a stream deleted and created again is reloaded from scratch, a
missing one is :class:`~readergroup.core.errors.StreamNotFoundError`.

After a sealed-segment error the next fetch also completes the scales a crash left half done
(:func:`complete_scale_seals`, the threaded cache's repair, awaited), so an asyncio writer
never waits on a successor left closed either.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from readergroup.admin.stream_steps import scale_completion
from readergroup.client.metadata_cache import FreshStates, fetch_stream_state
from readergroup.core.errors import ReaderGroupError
from readergroup.core.names import stream_sync_name
from readergroup.core.stream_metadata import STATE_TYPES, UPDATE_TYPES, StreamState
from readergroup.storage.aio_calls import drive_async


async def complete_scale_seals(connection: Any, state: StreamState) -> None:
    """The threaded :func:`~readergroup.admin.stream_manager.complete_scale_seals`, awaited
    on ``connection``'s segments: the same procedure
    (:func:`~readergroup.admin.stream_steps.scale_completion`), decisions and warnings."""
    await drive_async(scale_completion(connection.segments, state))


class AsyncStreamStates(Protocol):
    """Where the asyncio writer gets a stream's metadata."""

    async def get(self, scope: str, stream: str) -> StreamState:
        """The stream's state; :class:`~readergroup.core.errors.StreamNotFoundError` if it
        does not exist, a retriable error on an outage."""
        ...

    def invalidate(self, scope: str, stream: str) -> None:
        """The cached state is stale (a segment was found sealed): fetch at the next
        :meth:`get`."""
        ...


class SynchronizedStreamStates:
    """Streams' states from one asyncio synchronizer per stream, opened on ``connection``
    (an :class:`~readergroup.storage.aio_admin.AsyncAdminConnection`, or the memory
    backend's) and kept (see the module docstring). For one event loop."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._syncs: dict[tuple[str, str], Any] = {}

    async def fetch(self, scope: str, stream: str) -> StreamState:
        key = (scope, stream)
        sync = self._syncs.get(key)
        if sync is None:
            sync = self._syncs[key] = self._connection.synchronizer(
                stream_sync_name(scope, stream), UPDATE_TYPES, STATE_TYPES
            )
        return await drive_async(fetch_stream_state(sync, scope, stream))


class AsyncStreamMetadataCache:
    """Stream metadata by ``(scope, stream)``, fetched with ``fetch`` at most every ``ttl``
    seconds (``timer``: the monotonic clock by default). For one event loop."""

    def __init__(
        self,
        fetch: Callable[[str, str], Awaitable[StreamState]],
        ttl: float,
        timer: Callable[[], float] | None = None,
        *,
        repair: Callable[[StreamState], Awaitable[None]] | None = None,
    ) -> None:
        self._fetch = fetch
        self._repair = repair
        self._states = FreshStates(ttl, timer)

    async def get(self, scope: str, stream: str) -> StreamState:
        key = (scope, stream)
        cached = self._states.fresh(key)
        if cached is not None:
            return cached
        state = await self._fetch(scope, stream)
        if self._states.fetched(key, state) and self._repair is not None:
            try:
                await self._repair(state)
            except ReaderGroupError as exc:  # the caller retries; so does the repair
                self._states.repair_failed(key, exc)
        return state

    def invalidate(self, scope: str, stream: str) -> None:
        self._states.invalidate((scope, stream))
