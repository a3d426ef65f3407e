"""The periodic looks of idle asyncio readers, shared: :class:`PeriodicLooks`, one per event
loop (:func:`looks_of`), runs ONE timer per period (a group's ``group_refresh_time``) that
calls every registered look in turn, instead of a timer of each reader's own per period. Two
hundred idle readers of one loop then cost it one wake-up and one timer per period, not two
hundred; each reader is looked at as often as before (at least once per period)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

Look = Callable[[], bool]
"""A reader's look: ``True`` when it needs no more (its wait is over)."""


class PeriodicLooks:
    """The looks registered on one event loop, by period (see the module doc)."""

    def __init__(self) -> None:
        self._looks: dict[float, dict[Look, None]] = {}
        self._timers: dict[float, asyncio.TimerHandle] = {}

    def add(self, period: float, look: Look) -> None:
        """Call ``look`` once per ``period`` s (the first within ``period``) until it returns
        ``True`` or is :meth:`discard`-ed (called in the loop)."""
        self._looks.setdefault(period, {})[look] = None
        if period not in self._timers:
            self._timers[period] = asyncio.get_running_loop().call_later(period, self._tick, period)

    def discard(self, period: float, look: Look) -> None:
        looks = self._looks.get(period)
        if looks is not None:
            looks.pop(look, None)

    def _tick(self, period: float) -> None:
        looks = self._looks.get(period, {})
        for look in list(looks):
            if look():
                looks.pop(look, None)
        if looks:
            self._timers[period] = asyncio.get_running_loop().call_later(period, self._tick, period)
        else:
            self._looks.pop(period, None)
            del self._timers[period]

    def __len__(self) -> int:
        """Looks registered (an instrument for tests)."""
        return sum(len(looks) for looks in self._looks.values())


_LOOKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PeriodicLooks] = (
    weakref.WeakKeyDictionary()
)


def looks_of(loop: asyncio.AbstractEventLoop) -> PeriodicLooks:
    """The one :class:`PeriodicLooks` of ``loop`` (made at the first call, gone with it)."""
    looks = _LOOKS.get(loop)
    if looks is None:
        looks = _LOOKS[loop] = PeriodicLooks()
    return looks
