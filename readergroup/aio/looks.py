"""The timers of idle asyncio readers, shared by the readers of one event loop.

* :class:`PeriodicLooks` (:func:`looks_of`) runs ONE timer per period (a group's
  ``group_refresh_time``) that calls every registered look in turn, instead of a timer of each
  reader's own per period. Two hundred idle readers of one loop then cost it one wake-up and
  one timer per period, not two hundred; each reader is looked at as often as before (at least
  once per period).
* :class:`SharedAlarms` (:func:`alarms_of`) resolves futures at given instants of the loop's
  clock with ONE timer per instant: the heartbeat tasks' pauses end on a grid of instants
  (:data:`~readergroup.aio.session.BEAT_GRID`), so the readers beating at one instant share
  its timer (and no pause ends by cancelling its task, as ``asyncio.timeout`` does)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

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


_Shared = TypeVar("_Shared")


def _one_per_loop(
    registry: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared],
    loop: asyncio.AbstractEventLoop,
    make: Callable[[], _Shared],
) -> _Shared:
    """``loop``'s entry of ``registry``, made by ``make`` at the first call (gone with it)."""
    found = registry.get(loop)
    if found is None:
        found = registry[loop] = make()
    return found


_LOOKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PeriodicLooks] = (
    weakref.WeakKeyDictionary()
)


def looks_of(loop: asyncio.AbstractEventLoop) -> PeriodicLooks:
    """The one :class:`PeriodicLooks` of ``loop`` (made at the first call, gone with it)."""
    return _one_per_loop(_LOOKS, loop, PeriodicLooks)


class SharedAlarms:
    """Futures resolved at instants of one event loop's clock, one timer per instant (see
    the module doc)."""

    def __init__(self) -> None:
        self._due: dict[float, list[asyncio.Future[None]]] = {}

    def add(self, when: float, alarm: asyncio.Future[None]) -> None:
        """Resolve ``alarm`` (with ``None``, unless it is done by then) at the loop's time
        ``when``; the first alarm of an instant sets its timer (called in the loop)."""
        waiting = self._due.get(when)
        if waiting is None:
            waiting = self._due[when] = []
            asyncio.get_running_loop().call_at(when, self._ring, when)
        waiting.append(alarm)

    def _ring(self, when: float) -> None:
        for alarm in self._due.pop(when, ()):
            if not alarm.done():
                alarm.set_result(None)

    def __len__(self) -> int:
        """Instants with a timer set (an instrument for tests)."""
        return len(self._due)


_ALARMS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedAlarms] = (
    weakref.WeakKeyDictionary()
)


def alarms_of(loop: asyncio.AbstractEventLoop) -> SharedAlarms:
    """The one :class:`SharedAlarms` of ``loop`` (made at the first call, gone with it)."""
    return _one_per_loop(_ALARMS, loop, SharedAlarms)
