"""Driving a sans-I/O generator: logic written once as a generator that *yields* the I/O it
needs and is *sent* each outcome (or has the I/O's exception *thrown* in), run by a blocking
loop in threaded code and by an awaiting one in asyncio code. Pure."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Generic, TypeVar

S = TypeVar("S")


class StepDriver(Generic[S]):
    """Feeds ``steps`` the outcome of each step (the one loop behind
    :func:`readergroup.core.calls.drive`, its asyncio twin and the writers' rounds). A
    driver's loop is::

    while (step := driver.next()) is not None:
        try:
            driver.reply = perform(step)  # (or: await perform(step))
        except Exception as exc:
            driver.error = exc  # thrown into the steps, which decide

    """

    __slots__ = ("_steps", "error", "reply", "result")

    def __init__(self, steps: Generator[S, Any, Any]) -> None:
        self._steps = steps
        self.reply: Any = None
        self.error: BaseException | None = None
        self.result: Any = None
        """What the steps returned, once over."""

    def next(self) -> S | None:
        """The next step (``None``: the steps are over)."""
        try:
            if self.error is None:
                step = self._steps.send(self.reply)
            else:
                step = self._steps.throw(self.error)
        except StopIteration as finished:
            self.result = finished.value
            return None
        self.reply, self.error = None, None
        return step
