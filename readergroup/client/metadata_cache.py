"""Cached stream metadata for writers and readers (``cachetools.TTLCache``).

A writer routes every event with the stream's active segments; reading the metadata for each
event would cost a round trip. The cache keeps one state synchronizer per stream and trusts
its local copy for ``ClientConfig.metadata_ttl`` seconds; a sealed-segment error invalidates
the entry so the next lookup fetches at once, and finishes any scale left undone by a crash
(:func:`~readergroup.admin.stream_manager.complete_scale_seals`), so writers never wait on a
successor left closed. A stream found deleted and created again (its log
regressed: Redis lost its data and the application re-ran its set-up) is reloaded from scratch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from readergroup.admin.stream_manager import complete_scale_seals
from readergroup.core.calls import Steps, drive
from readergroup.core.errors import ReaderGroupError, StreamNotFoundError
from readergroup.core.names import stream_sync_name
from readergroup.core.stream_metadata import STATE_TYPES, UPDATE_TYPES, StreamState
from readergroup.storage.connection_api import Connection
from readergroup.storage.vanished import fetch_adopting_steps
from statesync import StateSynchronizer

log = logging.getLogger(__name__)


class FreshStates:
    """The cache's decisions, shared by this cache and the asyncio writer's
    (:class:`~readergroup.aio.metadata.AsyncStreamMetadataCache`): which stream's metadata is
    fresh enough to use (``ttl`` seconds since it was fetched; ``timer``: the monotonic clock
    by default), and which must have its scales completed after its next fetch (it was
    invalidated after a sealed-segment error). Not thread-safe: its users serialize."""

    def __init__(self, ttl: float, timer: Callable[[], float] | None = None) -> None:
        self._fresh: TTLCache[tuple[str, str], StreamState] = (
            TTLCache(maxsize=1024, ttl=ttl, timer=timer)
            if timer
            else TTLCache(maxsize=1024, ttl=ttl)
        )
        self._repair: set[tuple[str, str]] = set()

    def fresh(self, key: tuple[str, str]) -> StreamState | None:
        return self._fresh.get(key)

    def fetched(self, key: tuple[str, str], state: StreamState) -> bool:
        """Keep ``state`` as fetched now; return whether its scales must be completed now."""
        self._fresh[key] = state
        repair = key in self._repair
        self._repair.discard(key)
        return repair

    def repair_failed(self, key: tuple[str, str], exc: ReaderGroupError) -> None:
        """Completing the scales failed (the caller retries): try again after the next
        fetch."""
        log.warning("could not complete the scales of %s/%s: %s", *key, exc, exc_info=exc)
        self._repair.add(key)

    def invalidate(self, key: tuple[str, str]) -> None:
        """Drop the entry after a sealed-segment error: the next lookup fetches and repairs."""
        self._fresh.pop(key, None)
        self._repair.add(key)


class StreamMetadataCache:
    """Stream metadata by ``(scope, stream)``, refreshed at most every ``ttl`` seconds.

    Thread-safe. ``timer`` is injectable (defaults to the monotonic clock).
    """

    def __init__(
        self, connection: Connection, ttl: float, timer: Callable[[], float] | None = None
    ) -> None:
        self._connection = connection
        self._states = FreshStates(ttl, timer)
        self._syncs: dict[tuple[str, str], StateSynchronizer[StreamState]] = {}
        self._lock = threading.Lock()

    def get(self, scope: str, stream: str) -> StreamState:
        key = (scope, stream)
        with self._lock:
            cached = self._states.fresh(key)
            if cached is not None:
                return cached
            sync = self._syncs.get(key)
            if sync is None:
                sync = self._syncs[key] = self._connection.synchronizer(
                    stream_sync_name(scope, stream), UPDATE_TYPES, STATE_TYPES
                )
        state = drive(fetch_stream_state(sync, scope, stream))
        with self._lock:
            repair = self._states.fetched(key, state)
        if repair:
            self._complete_scales(key, state)
        return state

    def _complete_scales(self, key: tuple[str, str], state: StreamState) -> None:
        try:
            complete_scale_seals(self._connection, state)
        except ReaderGroupError as exc:  # the caller retries; so does the repair, next time
            with self._lock:
                self._states.repair_failed(key, exc)

    def invalidate(self, scope: str, stream: str) -> None:
        """Drop the entry after a sealed-segment error: the next lookup fetches and repairs."""
        with self._lock:
            self._states.invalidate((scope, stream))


def fetch_stream_state(sync: Any, scope: str, stream: str) -> Steps[StreamState]:
    """Fetch the stream's synchronizer (threaded or asyncio: the threaded cache runs this
    blocking, the asyncio writer's awaits it); its state. A stream found deleted and created
    again is reloaded from scratch; one that does not exist raises StreamNotFoundError."""
    state: StreamState = yield from fetch_adopting_steps(
        sync, stream_missing(scope, stream), "read stream metadata"
    )
    return state


def stream_missing(scope: str, stream: str) -> Callable[[], ReaderGroupError]:
    """The error for a stream whose metadata does not exist."""
    return lambda: StreamNotFoundError(f"stream {scope}/{stream} does not exist")
