"""Running :mod:`readergroup.core.procedures` procedures in asyncio: each call awaited on the
caller's event loop (see :func:`run_calls_async`)."""

from __future__ import annotations

import asyncio
import inspect
from typing import TypeVar

from readergroup.core.procedures import Call, Procedure
from readergroup.core.steps import StepDriver

R = TypeVar("R")


async def run_calls_async(procedure: Procedure[R]) -> R:
    """Run ``procedure``, awaiting each call (a target whose method returns a plain value,
    as the in-memory backend's do, is not awaited); return what it returns. Cancelled, the
    procedure is closed at the call it was waiting on (its ``with`` blocks exit), or after it
    if that call swallowed the cancellation (the task is still ``cancelling()``)."""
    driver: StepDriver[Call] = StepDriver(procedure)
    task = asyncio.current_task()
    try:
        while (step := driver.next()) is not None:
            try:
                reply = step.perform()
                if inspect.isawaitable(reply):
                    reply = await reply
                driver.reply = reply
            except Exception as exc:  # thrown into the procedure, which decides
                driver.error = exc
            if task is not None and task.cancelling():
                # a step swallowed the cancellation (Python 3.11's wait_for does when a
                # wake-up races it): end here all the same
                raise asyncio.CancelledError
    finally:
        procedure.close()  # (cancelled: at the call it waited on; else a no-op)
    result: R = driver.result
    return result
