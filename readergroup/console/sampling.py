"""What the console remembers between refreshes (in memory, nothing in Redis): event rates from
successive counter readings, and each group's lag over the last minutes. Both are thread-safe
(views computed at the same time share them)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field


@dataclass
class RateMeter:
    """Events per second per counter from successive readings of monotone counters (segment
    tails, committed positions). A counter seen for the first time counts from its previous
    reading only; a counter that went back (a reset, a truncation) counts nothing."""

    min_interval: float = 0.5
    """Readings closer together than this keep the previous rates (no noisy spikes)."""
    _last: dict[Hashable, tuple[float, dict[Hashable, int]]] = field(default_factory=dict)
    _rates: dict[Hashable, dict[Hashable, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, key: Hashable, now: float, counters: Mapping[Hashable, int]) -> None:
        with self._lock:
            self._update(key, now, counters)

    def _update(self, key: Hashable, now: float, counters: Mapping[Hashable, int]) -> None:
        previous = self._last.get(key)
        if previous is not None and now - previous[0] < self.min_interval:
            return
        if previous is not None:
            elapsed = now - previous[0]
            self._rates[key] = {
                name: max(0, value - previous[1].get(name, value)) / elapsed
                for name, value in counters.items()
            }
        self._last[key] = (now, dict(counters))

    def rates(self, key: Hashable) -> dict[Hashable, float] | None:
        """Rate of each counter of ``key``; ``None`` before two readings."""
        with self._lock:
            return self._rates.get(key)

    def total(self, key: Hashable) -> float | None:
        rates = self.rates(key)
        return None if rates is None else sum(rates.values())


@dataclass
class LagHistory:
    """Total and per-segment lag (events) of each group, sampled by the console, for the last
    ``seconds``. Samples closer than ``min_interval`` replace the previous one."""

    seconds: float = 900.0
    min_interval: float = 1.0
    _samples: dict[Hashable, deque[tuple[int, int, dict[str, int]]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self, group: Hashable, server_ms: int, total: int, segments: Mapping[str, int]
    ) -> None:
        with self._lock:
            self._record(group, server_ms, total, segments)

    def _record(
        self, group: Hashable, server_ms: int, total: int, segments: Mapping[str, int]
    ) -> None:
        samples = self._samples.setdefault(group, deque())
        if samples and server_ms < samples[-1][0]:
            return  # a view computed at the same time recorded a newer sample
        if samples and server_ms - samples[-1][0] < self.min_interval * 1000:
            samples.pop()
        samples.append((server_ms, total, dict(segments)))
        while samples and samples[0][0] < server_ms - self.seconds * 1000:
            samples.popleft()

    def series(self, group: Hashable, top: int = 8) -> dict[str, object]:
        """``{"times": [...], "total": [...], "segments": {name: [...]}}`` with the ``top``
        segments that lagged most over the window (a chart of 1,024 lines says nothing)."""
        with self._lock:
            samples = list(self._samples.get(group, ()))
        peaks: dict[str, int] = {}
        for _, _, segments in samples:
            for name, lag in segments.items():
                peaks[name] = max(peaks.get(name, 0), lag)
        chosen = sorted((n for n, peak in peaks.items() if peak > 0), key=lambda n: -peaks[n])
        return {
            "times": [s[0] for s in samples],
            "total": [s[1] for s in samples],
            "segments": {n: [s[2].get(n) for s in samples] for n in sorted(chosen[:top])},
        }

    def forget(self, group: Hashable) -> None:
        with self._lock:
            self._samples.pop(group, None)
