"""An in-process :class:`~statesync.backend.LogBackend` for tests and simulations.

Same contract and status codes as the Redis backend (the shared test suite runs against
both), with an injectable server clock so simulations are deterministic. Not durable, not
shared between processes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace

from statesync import status
from statesync.backend import (
    MAX_DISJOINT_WINDOW,
    AppendOutcome,
    CompactOutcome,
    RawEntry,
    ReadResult,
)
from statesync.names import validate_name
from statesync.watched_condition import WatchedCondition


@dataclass
class _Log:
    incarnation: str
    revision: int = 0
    trunc: int = 0
    snap: int = 0
    entries: dict[int, RawEntry] = field(default_factory=dict)
    snapshots: dict[int, bytes] = field(default_factory=dict)
    writers: dict[str, tuple[int, int]] = field(default_factory=dict)
    histories: dict[int, str] = field(default_factory=dict)
    """Revision -> history, from the truncation point to the head (see history.lua)."""
    woken: int = 0
    """Revision of the newest entry whose wake-up is for every follower."""
    followers_woken: dict[str, int] = field(default_factory=dict)
    """Follower -> revision of the newest entry whose wake-up named it."""
    keys: dict[int, frozenset[str] | None] = field(default_factory=dict)
    """Revision -> the keys its entry concerns (``None``: the whole state)."""

    def signal(self, revision: int, followers: Collection[str] | None) -> bool:
        """Wake ``followers`` (``None``: every follower) for ``revision``, each only if not
        woken for it or later yet; whether anyone was."""
        if followers is None:
            if self.woken >= revision:
                return False
            self.woken = revision
            return True
        named = self.followers_woken
        behind = [f for f in followers if named.get(f, -1) < revision]
        named.update(dict.fromkeys(behind, revision))
        return bool(behind)

    def disjoint_since(self, expected: int, keys: frozenset[str] | None) -> bool:
        """Whether every entry after ``expected`` concerns only keys other than ``keys``."""
        if not keys or expected < self.trunc or self.revision - expected > MAX_DISJOINT_WINDOW:
            return False
        for revision in range(expected + 1, self.revision + 1):
            touched = self.keys.get(revision)
            if touched is None or touched & keys:
                return False
        return True

    def history_at(self, revision: int) -> str:
        """The history at ``revision``, ``""`` when it is not known any more."""
        if self.trunc <= revision <= self.revision:
            return self.histories.get(revision, "")
        return ""

    def regressed(self, incarnation: str, anchor_revision: int, anchor_history: str) -> int | None:
        """The ``REGRESSED`` kind if a replica so described is not of this log, else None."""
        if incarnation and incarnation != self.incarnation:
            return status.OTHER_INCARNATION
        if anchor_revision > self.revision:
            return status.OTHER_HISTORY
        if anchor_history and anchor_revision >= 0:
            known = self.history_at(anchor_revision)
            if known and known != anchor_history:
                return status.OTHER_HISTORY
        return None


class MemoryLogBackend:
    """Synchronizer logs in a dict, guarded by one condition variable. Thread-safe.

    ``server_clock`` returns the "server" time in milliseconds; it defaults to a counter
    that ticks by one per call, so nothing here reads the wall clock.
    """

    def __init__(
        self,
        server_clock: Callable[[], int] | None = None,
        *,
        changed: WatchedCondition | None = None,
    ) -> None:
        """``changed``: the condition to notify on every change (a caller waiting on these
        logs and on other in-memory data at once shares one)."""
        self._logs: dict[str, _Log] = {}
        self._changed = changed or WatchedCondition()
        self._ticks = 0
        self._server_clock = server_clock or self._tick

    def watching(self, watcher: Callable[[], None]) -> AbstractContextManager[None]:
        """Call ``watcher`` (under this backend's lock: it must only schedule, never block)
        after every change of a log (and of whatever else shares its condition) while the
        block runs: how an asyncio waiter
        (:class:`~statesync.aio_memory_backend.AsyncMemoryLogBackend`) learns of appends
        without blocking its event loop on the condition."""
        return self._changed.watching(watcher)

    def _notify(self) -> None:
        """Wake the threads waiting on the condition, and the watchers (lock held)."""
        self._changed.notify_all()

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
            self._logs[name] = _Log(
                incarnation, snapshots={0: snapshot}, histories={0: incarnation}
            )
            self._notify()
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
        incarnation: str = "",
        anchor_revision: int = -1,
        anchor_history: str = "",
        wake: bool | Collection[str] = True,
        keys: Sequence[str] | None = None,
    ) -> AppendOutcome:
        concerns = frozenset(keys) if keys else None
        with self._changed:
            log = self._get(name)
            last = log.writers.get(writer)
            if last is not None and last[0] >= sequence:
                return AppendOutcome(status.DUPLICATE, last[1])
            kind = log.regressed(incarnation, anchor_revision, "")
            if kind is not None:
                status.raise_for_status("append", name, [status.REGRESSED, log.revision, kind])
            if (
                expected_revision is not None
                and expected_revision != log.revision
                and not log.disjoint_since(expected_revision, concerns)
            ):
                return AppendOutcome(status.CONFLICT, log.revision)
            kind = log.regressed("", anchor_revision, anchor_history)
            if kind is not None:
                status.raise_for_status("append", name, [status.REGRESSED, log.revision, kind])
            if len(payload) > max_bytes:
                status.raise_for_status("append", name, [status.TOO_LARGE, len(payload), max_bytes])
            now = self._server_clock()
            previous = log.histories.get(log.revision, log.incarnation)
            history = hashlib.sha1(previous.encode() + payload).hexdigest()  # noqa: S324
            log.revision += 1
            log.entries[log.revision] = RawEntry(log.revision, now, bytes(payload), history)
            log.histories[log.revision] = history
            log.writers[writer] = (sequence, log.revision)
            log.keys[log.revision] = concerns
            # named followers: decided on the writer's replica (it names them again with
            # ``wake`` if the entry landed past others)
            if wake is not False:
                log.signal(log.revision, None if wake is True else wake)
            self._notify()
            return AppendOutcome(status.OK, log.revision, now, history)

    def wake(self, name: str, revision: int, followers: Collection[str] | None) -> bool:
        with self._changed:
            log = self._get(name)
            if revision > log.revision or not log.signal(revision, followers):
                return False
            self._notify()
            return True

    def read(
        self,
        name: str,
        after_revision: int,
        limit: int,
        *,
        max_entry_bytes: int | None = None,
        max_snapshot_bytes: int | None = None,
    ) -> ReadResult:
        with self._changed:
            log = self._get(name)
            snapshot_revision, snapshot, anchor, snapshot_history = -1, None, "", ""
            refused = 0
            if after_revision < log.trunc:
                snapshot_revision, snapshot = log.snap, log.snapshots[log.snap]
                snapshot_history = log.history_at(log.snap)
                after_revision = log.snap
                if max_snapshot_bytes is not None and len(log.snapshots[log.snap]) > (
                    max_snapshot_bytes
                ):
                    snapshot, refused = None, len(log.snapshots[log.snap])
            else:
                anchor = log.history_at(after_revision)
            last = min(log.revision, after_revision + limit)
            entries = [log.entries[r] for r in range(after_revision + 1, last + 1)]
            if max_entry_bytes is not None:
                entries = [
                    replace(e, payload=b"", refused_size=len(e.payload))
                    if len(e.payload) > max_entry_bytes
                    else e
                    for e in entries
                ]
            return ReadResult(
                log.revision,
                log.incarnation,
                snapshot_revision,
                snapshot,
                entries,
                anchor,
                snapshot_history,
                refused,
            )

    def newest(self, name: str, *, wakes_only: bool = False, follower: str | None = None) -> int:
        """The revision of the newest entry of ``name`` (if ``wakes_only``: whose wake-up is
        for every follower, or names ``follower``); ``-1`` if there is no such log."""
        with self._changed:
            log = self._logs.get(name)
            if log is None:
                return -1
            if not wakes_only:
                return log.revision
            if follower is None:
                return log.woken
            return max(log.woken, log.followers_woken.get(follower, -1))

    def wait(
        self,
        name: str,
        after_revision: int,
        timeout: float,
        *,
        wakes_only: bool = False,
        follower: str | None = None,
    ) -> bool:
        def has_news() -> bool:
            return self.newest(name, wakes_only=wakes_only, follower=follower) > after_revision

        with self._changed:
            return self._changed.wait_for(has_news, timeout=timeout)

    def compact(
        self,
        name: str,
        revision: int,
        snapshot: bytes,
        *,
        incarnation: str = "",
        history: str = "",
    ) -> CompactOutcome:
        with self._changed:
            log = self._get(name)
            kind = log.regressed(incarnation, -1, "")
            if kind is None and revision <= log.revision:
                kind = log.regressed("", revision, history)
            if kind is not None:
                status.raise_for_status("compact", name, [status.REGRESSED, log.revision, kind])
            if revision > log.revision:
                status.raise_for_status("compact", name, [status.AHEAD, log.revision])
            previous = log.snap
            if revision <= previous:
                return CompactOutcome(False, previous, 0)
            log.snapshots = {previous: log.snapshots[previous], revision: snapshot}
            removed = [r for r in log.entries if r <= previous]
            for r in removed:
                del log.entries[r]
                log.keys.pop(r, None)
            log.writers = {w: v for w, v in log.writers.items() if v[1] > previous}
            log.histories = {r: h for r, h in log.histories.items() if r >= previous}
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
