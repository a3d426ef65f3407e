"""A connection in memory: :class:`MemoryConnection` has the interface the admin and client
layers use of :class:`~readergroup.storage.connection.RedisConnection` (the
:class:`~readergroup.storage.connection_api.Connection` protocol, checked by mypy), composed
of :class:`~readergroup.testing.memory_segments.MemorySegmentStore`,
:class:`~statesync.memory_backend.MemoryLogBackend` and
:class:`~readergroup.testing.memory_heartbeats.MemoryHeartbeatStore`, so the reader/writer
suite runs unchanged on memory and on Redis (the Redis run is the one to trust).

Everything shares one condition variable (a :class:`~statesync.watched_condition.
WatchedCondition`), so a blocking :meth:`MemoryConnection.read_keys` over segments and state
logs wakes on a change to any of them, as ``XREAD BLOCK`` does, and so does an asyncio read
watching it (:meth:`MemoryConnection.watching`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from readergroup.core.config import ClientConfig
from readergroup.storage.connection_api import Connection, SynchronizerSource
from readergroup.storage.keys import KeyLayout
from readergroup.storage.multi_read import MAX_BLOCK_SECONDS
from readergroup.testing.memory_heartbeats import MemoryHeartbeatStore
from readergroup.testing.memory_segments import MemorySegmentStore
from statesync import SyncConfig
from statesync.memory_backend import MemoryLogBackend
from statesync.watched_condition import WatchedCondition

_LOG_KEY = "memory-log:"
_WAKE_KEY = "memory-wake:"
_FOLLOWER_WAKE_KEY = "memory-wake-for:"


class MemoryHashes:
    """Hashes in a dict: the created-records of :mod:`readergroup.storage.vanished`."""

    def __init__(self) -> None:
        self._hashes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def hexists(self, name: str, key: str, /) -> bool:
        with self._lock:
            return key in self._hashes.get(name, {})

    def hset(self, name: str, key: str, value: Any, /) -> int:
        with self._lock:
            fields = self._hashes.setdefault(name, {})
            added = key not in fields
            fields[key] = value
            return int(added)

    def hdel(self, name: str, key: str, /) -> int:
        with self._lock:
            return int(self._hashes.get(name, {}).pop(key, None) is not None)


class MemorySubscribers:
    """External retention subscribers' published cuts, in a dict."""

    def __init__(self) -> None:
        self._cuts: dict[tuple[str, str], dict[str, str]] = {}
        self._lock = threading.Lock()

    def publish(self, scope: str, stream: str, subscriber: str, cut: str) -> None:
        with self._lock:
            self._cuts.setdefault((scope, stream), {})[subscriber] = cut

    def unsubscribe(self, scope: str, stream: str, subscriber: str) -> None:
        with self._lock:
            self._cuts.get((scope, stream), {}).pop(subscriber, None)

    def published(self, scope: str, stream: str) -> dict[str, str]:
        with self._lock:
            return dict(self._cuts.get((scope, stream), {}))

    def delete(self, scope: str, stream: str) -> None:
        with self._lock:
            self._cuts.pop((scope, stream), None)


class _DoneRead:
    """A read ahead answered at once (memory has no round trip to overlap)."""

    def __init__(self, positions: Mapping[str, str], reply: dict[str, Any]) -> None:
        self.positions = dict(positions)
        self._reply = reply

    def ready(self, timeout: float = 0.0) -> bool:
        return True

    def result(self, timeout: float) -> dict[str, Any] | None:
        return self._reply

    def cancel(self) -> None:
        self._reply = {}


class _WaitingRead:
    """A blocking read sent ahead: answered when something arrives or ``block`` s passed."""

    def __init__(
        self, connection: MemoryConnection, positions: Mapping[str, str], limit: int, block: float
    ) -> None:
        self.positions = dict(positions)
        self._connection, self._limit = connection, limit
        self._deadline = time.monotonic() + min(block, MAX_BLOCK_SECONDS)
        self._reply: dict[str, Any] | None = None

    def ready(self, timeout: float = 0.0) -> bool:
        if self._reply is None:
            wait = min(max(0.0, timeout), self._deadline - time.monotonic())
            found = self._connection.read_keys(self.positions, max(0.0, wait), self._limit)
            if found or time.monotonic() >= self._deadline:
                self._reply = found
        return self._reply is not None

    def result(self, timeout: float) -> dict[str, Any] | None:
        return self._reply if self.ready(timeout) else None

    def cancel(self) -> None:
        self._reply = {}


class MemoryConnection(SynchronizerSource):
    """Segments, state logs, heartbeats and records of one in-memory "server". Thread-safe.

    ``now_ms`` is the server clock (default: the wall clock, as reader sessions expire in real
    time on both backends)."""

    cluster = False

    log_backend: MemoryLogBackend

    def __init__(
        self, config: ClientConfig | None = None, now_ms: Callable[[], int] | None = None
    ) -> None:
        self.config = config or ClientConfig()
        self.keys = KeyLayout(self.config.key_prefix)
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._changed = WatchedCondition()
        self.log_backend = MemoryLogBackend(self.server_time_ms, changed=self._changed)
        self._segments = MemorySegmentStore(self.server_time_ms, changed=self._changed)
        self._records = MemoryHashes()
        self._subscribers = MemorySubscribers()
        self._heartbeats: dict[str, MemoryHeartbeatStore] = {}
        self._segment_of_key: dict[str, tuple[str, str, int]] = {}
        self._sync_config = SyncConfig(
            key_prefix=self.config.key_prefix,
            retry=self.config.retry,
            compact_every=self.config.compact_every,
        )

    @property
    def segments(self) -> MemorySegmentStore:
        return self._segments

    @property
    def records(self) -> MemoryHashes:
        return self._records

    @property
    def subscribers(self) -> MemorySubscribers:
        return self._subscribers

    def server_time_ms(self) -> int:
        return self._now_ms()

    def primary_switches(self) -> int:
        """Always 0: one "server", which never fails over."""
        return 0

    def heartbeat_store(self, sync_name: str) -> MemoryHeartbeatStore:
        with self._changed:
            store = self._heartbeats.get(sync_name)
            if store is None:
                store = self._heartbeats[sync_name] = MemoryHeartbeatStore(self.server_time_ms)
            return store

    def wake_on(
        self, sync_name: str, after_revision: int, *, wakes_only: bool = False
    ) -> tuple[str, str]:
        return (_WAKE_KEY if wakes_only else _LOG_KEY) + sync_name, f"{max(after_revision, 0)}-0"

    def follower_wake_on(
        self, sync_name: str, after_revision: int, follower: str
    ) -> tuple[str, str]:
        return f"{_FOLLOWER_WAKE_KEY}{follower}\n{sync_name}", f"{max(after_revision, 0)}-0"

    def read_ahead(
        self, positions: Mapping[str, str], limit: int, *, block: float | None = None
    ) -> _DoneRead | _WaitingRead:
        if block is not None:
            return _WaitingRead(self, positions, limit, block)
        return _DoneRead(positions, self.read_now(positions, limit))

    def read_keys(self, positions: Mapping[str, str], timeout: float, limit: int) -> dict[str, Any]:
        """Entries after ``positions`` (key -> ``"<offset or revision>-0"``) of segments and
        state logs (:meth:`wake_on` keys), waiting up to ``timeout`` s (at most 5) for any."""
        deadline = time.monotonic() + min(timeout, MAX_BLOCK_SECONDS)
        with self._changed:
            while True:
                found = self.read_now(positions, limit)
                remaining = deadline - time.monotonic()
                if found or remaining <= 0:
                    return found
                self._changed.wait(remaining)

    def watching(self, watcher: Callable[[], None]) -> AbstractContextManager[None]:
        """Call ``watcher`` after every change of a segment or a state log while the block runs
        (from the changing thread, lock held: it must only schedule): how an asyncio read
        (:mod:`readergroup.testing.aio_memory_reads`) waits without blocking its loop."""
        return self._changed.watching(watcher)

    def read_now(self, positions: Mapping[str, str], limit: int) -> dict[str, Any]:
        """What :meth:`read_keys` finds at once (never waits)."""
        found: dict[str, Any] = {}
        with self._changed:
            for key, after in positions.items():
                position = int(after.partition("-")[0])
                for prefix in (_LOG_KEY, _WAKE_KEY, _FOLLOWER_WAKE_KEY):
                    if key.startswith(prefix):
                        follower, _, name = key[len(prefix) :].rpartition("\n")
                        newest = self.log_backend.newest(
                            name, wakes_only=prefix != _LOG_KEY, follower=follower or None
                        )
                        if newest > position:
                            found[key] = [[f"{newest}-0".encode(), []]]
                        break
                else:
                    where = self._segment_at(key)
                    entries = (
                        []
                        if where is None
                        else self._segments.read_raw(*where, position, -1, limit)
                    )
                    if entries:
                        found[key] = entries
        return found

    def _segment_at(self, key: str) -> tuple[str, str, int] | None:
        if key not in self._segment_of_key:
            for scope, stream, number in self._segments.segment_ids():
                self._segment_of_key[self.keys.segment(scope, stream, number).events] = (
                    scope,
                    stream,
                    number,
                )
        return self._segment_of_key.get(key)

    def forget_stream(self, scope: str, stream: str) -> None:
        self._subscribers.delete(scope, stream)

    def close(self) -> None:
        self.log_backend.close()


def _conforms(connection: MemoryConnection) -> Connection:
    """mypy checks here that the memory connection has the interface the clients use."""
    return connection
