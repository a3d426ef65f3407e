"""The asyncio driver of :mod:`readergroup.core.calls` steps: each call awaited on the
caller's event loop. Here rather than in the pure core because it asks the running task
whether it is being cancelled; below ``admin/`` because the asyncio group member uses it."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Concatenate, NoReturn, ParamSpec, TypeVar

from readergroup.core.calls import Call, Steps, method_of
from readergroup.core.steps import StepDriver

R = TypeVar("R")
H = TypeVar("H")
P = ParamSpec("P")


async def drive_async(
    steps: Steps[R],
    io: object = None,
    *,
    local: Callable[[], Any] | None = None,
) -> R:
    """Run ``steps`` to their end, awaiting each call's result when it is awaitable (a plain
    value, such as an in-memory backend's, is taken as is); return what they return.

    ``local``: an async context manager factory held while the steps run their own code
    (between calls), never while a call is awaited (a reader's hand-out gate: the steps change
    the segment table only under it, as the threaded gate's lock is held).

    Cancellation: a :class:`BaseException` raised by an awaited call (``CancelledError``) is
    thrown into the steps, so their ``finally`` and ``except BaseException`` clauses run as they
    do for any failure; the steps are then closed and the exception re-raised. So is a
    cancellation a call swallowed (Python 3.11's ``asyncio.wait_for`` returns the result when a
    wake-up races the cancellation, leaving the task ``cancelling()``): noticed after that
    call (the task's count of cancel requests grew while it was awaited), so cancelled steps
    never run on. Steps started in a task already being cancelled (a reader's close on the
    way out of a cancelled ``async with``) run to their end unless cancelled anew."""
    driver: StepDriver[Call] = StepDriver(steps)
    task = asyncio.current_task()
    try:
        while True:
            if local is None:
                step = driver.next()
            else:
                async with local():
                    step = driver.next()
            if step is None:
                result: R = driver.result
                return result
            cancelling = 0 if task is None else task.cancelling()
            try:
                reply = method_of(io, step)(*step.args, **step.kwargs)
                if inspect.isawaitable(reply):
                    reply = await reply
                driver.reply = reply
            except Exception as exc:  # thrown into the steps, which decide
                driver.error = exc
            except BaseException as exc:  # cancelled: the steps clean up, then it is raised
                _end(steps, exc)
            if task is not None and task.cancelling() > cancelling:
                _end(steps, asyncio.CancelledError())  # the call swallowed a cancellation
    finally:
        steps.close()


def _end(steps: Generator[Call, Any, Any], cancelled: BaseException) -> NoReturn:
    """Throw ``cancelled`` into ``steps`` (their cleanup runs), then raise it (or what their
    cleanup raised instead)."""
    try:
        steps.throw(cancelled)
    except BaseException as raised:
        if raised is not cancelled and not isinstance(raised, StopIteration):
            raise
    raise cancelled


def awaited(
    method: Callable[Concatenate[H, P], Steps[R]],
) -> Callable[Concatenate[H, P], Coroutine[Any, Any, R]]:
    """A coroutine method running ``method``'s steps with :func:`drive_async` on the instance
    itself."""

    @functools.wraps(method)
    async def run(self: H, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await drive_async(method(self, *args, **kwargs), self)

    return run
