"""Heartbeats in memory with an injected clock: the second backend for simulations and tests."""

from __future__ import annotations

from collections.abc import Callable


class MemoryHeartbeatStore:
    """Heartbeats in a dict with an injected clock (simulations and tests)."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._beats: dict[str, tuple[int, int]] = {}

    def beat(
        self, reader_id: str, generation: int, *, claim: bool = False
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        now = self._now_ms()
        current = self._beats.get(reader_id)
        if reader_id and (claim or current is None or current[0] <= generation):
            self._beats[reader_id] = (generation, now)
        return now, dict(self._beats)

    def forget(self, reader_id: str, generation: int) -> None:
        current = self._beats.get(reader_id)
        if current is not None and current[0] <= generation:
            del self._beats[reader_id]
