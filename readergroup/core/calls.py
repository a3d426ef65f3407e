"""Decisions written once, run by threads and by asyncio tasks: *call steps*.

A protocol decision that needs I/O in the middle (a group member's conditional updates, a
reader's maintenance round, a stream manager's operation) is written as a generator that
yields a :class:`Call` for each piece of I/O and is sent the call's result (or has its
exception thrown in, so ``with``/``try`` blocks around a ``yield`` handle it as they would
around the call itself). A call names its method either by an attribute path on the driver's
*I/O object* (``"sync.update_state"``, ``"member.commit"``: :func:`call`) or on a target object
it carries (:func:`call_on`). The threaded shell runs the steps with :func:`drive`; the asyncio
shell with :func:`readergroup.storage.aio_calls.drive_async` (it needs the running task, so it
lives outside this pure layer), which awaits a call's result when it is awaitable. Both run
the one loop of :class:`~readergroup.core.steps.StepDriver`. Steps compose with
``yield from``. Every decision (what to call, in which order, what an error means) is then the
steps', in one place. Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from readergroup.core.steps import StepDriver

R = TypeVar("R")
H = TypeVar("H")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Call:
    """``<base>.<path>(*args, **kwargs)``, where ``base`` is ``target`` when given, else the
    driver's I/O object (awaited by the asyncio driver if the result is awaitable)."""

    path: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    target: Any = None


Steps = Generator[Call, Any, R]
"""Call steps returning ``R``."""


def call(path: str, *args: Any, **kwargs: Any) -> Steps[Any]:
    """One call on the driver's I/O object, as steps:
    ``result = yield from call("member.commit", positions)``."""
    return (yield Call(path, args, kwargs))


def call_on(target: Any, path: str, *args: Any, **kwargs: Any) -> Call:
    """One call on ``target``, to be yielded:
    ``now = yield call_on(connection, "server_time_ms")``."""
    return Call(path, args, kwargs, target)


def method_of(io: object, step: Call) -> Callable[..., Any]:
    """The callable ``step`` names (on its target, else on ``io``)."""
    base = io if step.target is None else step.target
    found: Any = functools.reduce(getattr, step.path.split("."), base)
    return found  # type: ignore[no-any-return]


def drive(steps: Steps[R], io: object = None) -> R:
    """Run ``steps`` to their end, performing each call (blocking); return what they return."""
    driver: StepDriver[Call] = StepDriver(steps)
    while (step := driver.next()) is not None:
        try:
            driver.reply = method_of(io, step)(*step.args, **step.kwargs)
        except Exception as exc:  # thrown into the steps, which decide
            driver.error = exc
    result: R = driver.result
    return result


def blocking(
    method: Callable[Concatenate[H, P], Steps[R]],
) -> Callable[Concatenate[H, P], R]:
    """A method running ``method``'s steps with :func:`drive` on the instance itself (its
    attributes are the steps' I/O)."""

    @functools.wraps(method)
    def run(self: H, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return drive(method(self, *args, **kwargs), self)

    return run
