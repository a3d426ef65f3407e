"""An in-process :class:`~statesync.backend.LogBackend` for tests and simulations.

Same contract and status codes as the Redis backend (the shared test suite runs against
both), with an injectable server clock so simulations are deterministic. Not durable, not
shared between processes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from statesync import status
from statesync.backend import AppendOutcome, CompactOutcome, RawEntry, ReadResult
from statesync.names import validate_name


@dataclass
class _Log:
    incarnation: str
    revision: int = 0
    trunc: int = 0
    snap: int = 0
    entries: dict[int, RawEntry] = field(default_factory=dict)
    snapshots: dict[int, bytes] = field(default_factory=dict)
    writers: dict[str, tuple[int, int]] = field(default_factory=dict)


class MemoryLogBackend:
    """Synchronizer logs in a dict, guarded by one condition variable. Thread-safe.

    ``server_clock`` returns the "server" time in milliseconds; it defaults to a counter
    that ticks by one per call, so nothing here reads the wall clock.
    """

    def __init__(self, server_clock: Callable[[], int] | None = None) -> None:
        self._logs: dict[str, _Log] = {}
        self._changed = threading.Condition()
        self._ticks = 0
        self._server_clock = server_clock or self._tick

    def _tick(self) -> int:
        self._ticks += 1
        return self._ticks

    def _get(self, name: str) -> _Log:
        log = self._logs.get(name)
        if log is None:
            status.raise_for_status("read", name, [status.NOT_FOUND])
            raise AssertionError("unreachable")
        return log

    def initialize(self, name: str, snapshot: bytes, incarnation: str) -> bool:
        validate_name(name)
        with self._changed:
            if name in self._logs:
                return False
            self._logs[name] = _Log(incarnation, snapshots={0: snapshot})
            self._changed.notify_all()
            return True

    def append(
        self,
        name: str,
        payload: bytes,
        *,
        expected_revision: int | None,
        writer: str,
        sequence: int,
        max_bytes: int,
    ) -> AppendOutcome:
        with self._changed:
            log = self._get(name)
            last = log.writers.get(writer)
            if last is not None and last[0] >= sequence:
                return AppendOutcome(status.DUPLICATE, last[1])
            if expected_revision is not None and expected_revision != log.revision:
                return AppendOutcome(status.CONFLICT, log.revision)
            if len(payload) > max_bytes:
                status.raise_for_status("append", name, [status.TOO_LARGE, len(payload), max_bytes])
            now = self._server_clock()
            log.revision += 1
            log.entries[log.revision] = RawEntry(log.revision, now, bytes(payload))
            log.writers[writer] = (sequence, log.revision)
            self._changed.notify_all()
            return AppendOutcome(status.OK, log.revision, now)

    def read(self, name: str, after_revision: int, limit: int) -> ReadResult:
        with self._changed:
            log = self._get(name)
            snapshot_revision, snapshot = -1, None
            if after_revision < log.trunc:
                snapshot_revision, snapshot = log.snap, log.snapshots[log.snap]
                after_revision = log.snap
            last = min(log.revision, after_revision + limit)
            entries = [log.entries[r] for r in range(after_revision + 1, last + 1)]
            return ReadResult(log.revision, log.incarnation, snapshot_revision, snapshot, entries)

    def wait(self, name: str, after_revision: int, timeout: float) -> bool:
        def has_news() -> bool:
            log = self._logs.get(name)
            return log is not None and log.revision > after_revision

        with self._changed:
            return self._changed.wait_for(has_news, timeout=timeout)

    def compact(self, name: str, revision: int, snapshot: bytes) -> CompactOutcome:
        with self._changed:
            log = self._get(name)
            if revision > log.revision:
                status.raise_for_status("compact", name, [status.AHEAD, log.revision])
            previous = log.snap
            if revision <= previous:
                return CompactOutcome(False, previous, 0)
            log.snapshots = {previous: log.snapshots[previous], revision: snapshot}
            removed = [r for r in log.entries if r <= previous]
            for r in removed:
                del log.entries[r]
            log.writers = {w: v for w, v in log.writers.items() if v[1] > previous}
            log.snap, log.trunc = revision, previous
            return CompactOutcome(True, previous, len(removed))

    def delete(self, name: str) -> bool:
        with self._changed:
            return self._logs.pop(name, None) is not None

    def server_time_ms(self) -> int:
        with self._changed:
            return self._server_clock()

    def close(self) -> None:
        """Nothing to release."""
