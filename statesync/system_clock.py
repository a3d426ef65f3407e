"""The real clock: :mod:`time` behind the :class:`~statesync.clock.Clock` interface."""

from __future__ import annotations

import time
from collections.abc import Callable

from statesync.clock import Clock


class SystemClock:
    """``time.monotonic`` and ``time.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


def monotonic_of(clock: Clock) -> Callable[[], float]:
    """``clock``'s ``monotonic``, or ``time.monotonic`` itself for the system clock (one call
    less on a fast path)."""
    if isinstance(clock, SystemClock):
        return time.monotonic
    return clock.monotonic
