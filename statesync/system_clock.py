"""The real clock: :mod:`time` behind the :class:`~statesync.clock.Clock` interface."""

from __future__ import annotations

import time


class SystemClock:
    """``time.monotonic`` and ``time.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
