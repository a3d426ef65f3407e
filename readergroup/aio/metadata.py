"""Stream metadata for the asyncio writer, never blocking the event loop.

:class:`AsyncStreamMetadataCache` makes the threaded cache's decisions
(:class:`~readergroup.client.metadata_cache.FreshStates`: trust a fetched state for
``ClientConfig.metadata_ttl`` seconds, fetch at once after a sealed-segment error) over an
:class:`AsyncStreamStates` source.

The source shipped now, :class:`LogStreamStates`, reads the stream's state log (its newest
snapshot and the entries after it, ``read.lua``, read-only) with the asyncio connection and
decodes it with the stream-state codec: one round trip per refresh, nothing kept between
refreshes, so a log deleted and created again, or one that lost entries in a failover, is
simply read as it is now. It is the interim source until statesync's asyncio synchronizer
(``AsyncStateSynchronizer``) takes its place behind the same Protocol.

After a sealed-segment error the next fetch also completes the scales a crash left half done
(:func:`complete_scale_seals`, the threaded cache's repair, awaited), so an asyncio writer
never waits on a successor left closed either.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from readergroup.admin.stream_manager import scale_completion
from readergroup.client.metadata_cache import FreshStates, stream_missing
from readergroup.core.errors import CoordinationError, ReaderGroupError
from readergroup.core.names import stream_sync_name
from readergroup.core.steps import StepDriver
from readergroup.core.stream_metadata import STATE_TYPES, UPDATE_TYPES, StreamState
from readergroup.storage.aio_connection_api import AsyncConnectionApi
from readergroup.storage.translate import translate_errors
from statesync import SynchronizerNotFoundError
from statesync.codec import Codec, TypeRegistry
from statesync.replica import Replica, advance

READ_BATCH = 1000
"""State-log entries read per round trip."""

_CODEC = Codec(TypeRegistry([*UPDATE_TYPES, *STATE_TYPES]))


async def complete_scale_seals(connection: AsyncConnectionApi, state: StreamState) -> None:
    """The threaded :func:`~readergroup.admin.stream_manager.complete_scale_seals`, awaited:
    the same decisions (:func:`~readergroup.admin.stream_manager.scale_completion`) and
    warnings."""
    segments = connection.segments
    calls = {
        "states": segments.segment_states,
        "seal": segments.seal_segments,
        "open": segments.open_segments,
    }
    driver = StepDriver(scale_completion(state))
    while (step := driver.next()) is not None:
        verb, ids = step
        driver.reply = await calls[verb](state.scope, state.stream, ids)


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


class LogStreamStates:
    """Reads a stream's state from its state log, each time (see the module docstring)."""

    def __init__(self, connection: AsyncConnectionApi) -> None:
        self._connection = connection

    async def fetch(self, scope: str, stream: str) -> StreamState:
        name = stream_sync_name(scope, stream)
        replica: Replica[StreamState] | None = None
        try:
            page = await self._connection.read_log(name, -1, READ_BATCH)
            with translate_errors(f"read stream metadata of {scope}/{stream}"):
                while True:
                    if page.snapshot is not None:
                        decoded = _CODEC.decode_snapshot(page.snapshot)
                        replica = Replica(decoded.state, decoded.revision, page.incarnation, 0)
                    if replica is None:
                        raise CoordinationError(f"{name}: its log has no snapshot to read")
                    entries = [
                        _CODEC.decode_entry(raw.revision, raw.server_time_ms, raw.payload)
                        for raw in page.entries
                    ]
                    replica = advance(replica, entries)
                    if replica.revision >= page.head_revision or not page.entries:
                        return replica.state
                    page = await self._connection.read_log(name, replica.revision, READ_BATCH)
        except SynchronizerNotFoundError as exc:
            raise stream_missing(scope, stream)() from exc


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
