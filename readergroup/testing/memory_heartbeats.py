"""Heartbeats in memory with an injected clock: the second backend for simulations and tests,
with the interface of :class:`~readergroup.storage.heartbeat_store.RedisHeartbeatStore`
(``tests/test_heartbeat_store.py`` runs on both)."""

from __future__ import annotations

from collections.abc import Callable

from readergroup.core.group_state import ReaderRecord
from readergroup.core.log_format import Announcement
from readergroup.core.membership import Renewal


class MemoryHeartbeatStore:
    """Heartbeats in a dict with an injected clock (simulations and tests)."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._beats: dict[str, tuple[int, int]] = {}
        self._clients: dict[str, str] = {}
        self._formats: dict[str, Announcement] = {}
        self._due = 0
        """When (store ms) the next renewal judges expiries (see :meth:`renew`)."""

    def beat(
        self, reader_id: str, generation: int, *, claim: bool = False
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        now = self._now_ms()
        current = self._beats.get(reader_id)
        if reader_id and (claim or current is None or current[0] <= generation):
            self._beats[reader_id] = (generation, now)
        return now, dict(self._beats)

    def renew(
        self,
        reader_id: str,
        generation: int,
        *,
        session_ms: int,
        judge_every_ms: int,
        judge: bool = False,
    ) -> Renewal:
        """As ``heartbeat.lua`` "renew" does (see
        :meth:`~readergroup.core.membership.HeartbeatStore.renew`)."""
        now = self._now_ms()
        before = self._beats.get(reader_id)
        if before is None or before[0] <= generation:
            self._beats[reader_id] = (generation, now)
        if now < self._due and not judge:
            return Renewal(now, before, None)
        beats = dict(self._beats)
        oldest = min([ms + session_ms + 1 for _, ms in beats.values()], default=now + session_ms)
        self._due = max(min(oldest, now + session_ms), now + judge_every_ms)
        return Renewal(now, before, beats)

    def forget(self, reader_id: str, generation: int) -> None:
        current = self._beats.get(reader_id)
        if current is not None and current[0] <= generation:
            del self._beats[reader_id]
            self._clients.pop(reader_id, None)

    def register(self, reader_id: str, client: str) -> None:
        """Record ``host/pid`` of ``reader_id`` (as :class:`RedisHeartbeatStore` does)."""
        self._clients[reader_id] = client

    def clients(self) -> dict[str, str]:
        return dict(self._clients)

    def announce(self, record: ReaderRecord, log_format: int) -> None:
        self._formats[record.reader_id] = (record.generation, record.joined_ms, log_format)

    def announcements(self) -> dict[str, Announcement]:
        return dict(self._formats)

    def withdraw(self, reader_id: str, generation: int) -> None:
        stored = self._formats.get(reader_id)
        if stored is not None and stored[0] <= generation:
            del self._formats[reader_id]

    def delete(self) -> None:
        """Forget every heartbeat, registered client and announced format (the group is being
        deleted)."""
        self._beats.clear()
        self._clients.clear()
        self._formats.clear()
        self._due = 0
