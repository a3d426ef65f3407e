"""What protocol code needs of time, as an injectable interface. Pure: no ``time`` import.

Production code passes :class:`statesync.system_clock.SystemClock`; tests and simulations pass
a fake whose ``sleep`` advances ``monotonic`` so that retries run deterministically.
"""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """A monotonic clock in seconds and a way to wait on it."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a fake advances ``monotonic`` instead)."""
        ...


class ManualClock:
    """A clock that moves only when told to (or when slept on). For tests and simulations."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def monotonic(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds
