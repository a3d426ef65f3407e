"""Decisions written once, run by threads and by asyncio tasks: *call steps*.

A protocol decision that needs I/O in the middle (a group member's conditional updates, a
reader's maintenance round) is written as a generator that yields a :class:`Call` for each
piece of I/O, naming it by an attribute path on an *I/O object* (``"sync.update_state"``,
``"member.commit"``), and is sent the call's result (or has its exception thrown in). The
threaded shell runs the steps with :func:`drive` on an object whose methods block; the asyncio
shell with :func:`drive_async` on one whose methods are coroutines. Every decision (what to
call, in which order, what an error means) is then the steps', in one place. Pure.

Cancellation (asyncio): a :class:`BaseException` raised by an awaited call (``CancelledError``)
is thrown into the steps, so their ``finally`` and ``except BaseException`` clauses run as they
do for any failure; the steps are then closed and the exception re-raised.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

R = TypeVar("R")
H = TypeVar("H")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Call:
    """``io.<path>(*args, **kwargs)`` on the driver's I/O object (awaited by an asyncio
    driver if the result is awaitable)."""

    path: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


Steps = Generator[Call, Any, R]
"""Call steps returning ``R``."""


def call(path: str, *args: Any, **kwargs: Any) -> Steps[Any]:
    """One call, as steps: ``result = yield from call("member.commit", positions)``."""
    return (yield Call(path, args, kwargs))


def target(io: object, path: str) -> Callable[..., Any]:
    """The callable ``path`` names on ``io``."""
    found: Any = functools.reduce(getattr, path.split("."), io)
    return found  # type: ignore[no-any-return]


def drive(steps: Steps[R], io: object) -> R:
    """Run ``steps`` to their end, calling each step's target on ``io`` (blocking)."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as finished:
            return finished.value  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = target(io, step.path)(*step.args, **step.kwargs)
        except Exception as exc:  # thrown into the steps, which decide
            error = exc


async def drive_async(
    steps: Steps[R],
    io: object,
    *,
    local: Callable[[], Any] | None = None,
) -> R:
    """Run ``steps`` to their end, awaiting each step's target on ``io`` when it returns an
    awaitable. ``local``: an async context manager factory held while the steps run their own
    code (between calls), never while a call is awaited (a reader's hand-out gate: the steps
    change the segment table only under it, as the threaded gate's lock is held)."""
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                if local is None:
                    step = steps.send(reply) if error is None else steps.throw(error)
                else:
                    async with local():
                        step = steps.send(reply) if error is None else steps.throw(error)
            except StopIteration as finished:
                return finished.value  # type: ignore[no-any-return]
            reply, error = None, None
            try:
                result = target(io, step.path)(*step.args, **step.kwargs)
                if inspect.isawaitable(result):
                    result = await _awaited(result)
                reply = result
            except Exception as exc:  # thrown into the steps, which decide
                error = exc
            except BaseException as exc:  # cancelled: the steps clean up, then it is raised
                try:
                    steps.throw(exc)
                except BaseException as raised:
                    if raised is not exc and not isinstance(raised, StopIteration):
                        raise
                raise
    finally:
        steps.close()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def blocking(
    method: Callable[Concatenate[H, P], Steps[R]],
) -> Callable[Concatenate[H, P], R]:
    """A method running ``method``'s steps with :func:`drive` on the instance itself (its
    attributes are the steps' I/O)."""

    @functools.wraps(method)
    def run(self: H, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return drive(method(self, *args, **kwargs), self)

    return run


def awaited(
    method: Callable[Concatenate[H, P], Steps[R]],
) -> Callable[Concatenate[H, P], Coroutine[Any, Any, R]]:
    """A coroutine method running ``method``'s steps with :func:`drive_async` on the instance
    itself."""

    @functools.wraps(method)
    async def run(self: H, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await drive_async(method(self, *args, **kwargs), self)

    return run
