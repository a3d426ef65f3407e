"""Logic written once for threaded and asyncio clients: a *procedure* is a generator that
yields each I/O it needs as a :class:`Call` (a method of some I/O object, with its arguments)
and is sent the result (or has the call's exception thrown in, so ``with``/``try`` blocks
around a ``yield`` handle it as they would around the call itself). :func:`run_calls` performs
the calls blocking; :func:`readergroup.aio.procedures.run_calls_async` awaits them (a call
returning a plain value, such as an in-memory backend's, is taken as is). Procedures compose
with ``yield from``. Pure: nothing here performs I/O by itself."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from readergroup.core.steps import StepDriver

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Call:
    """``target.method(*args, **kwargs)``, to be performed (and, in asyncio, awaited)."""

    target: Any
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def perform(self) -> Any:
        """Call it (in asyncio code: the awaitable, or the value of a non-async target)."""
        return getattr(self.target, self.method)(*self.args, **self.kwargs)


Procedure = Generator[Call, Any, R]
"""A procedure returning ``R`` (see the module docstring)."""


def call(target: Any, method: str, *args: Any, **kwargs: Any) -> Call:
    return Call(target, method, args, kwargs)


def run_calls(procedure: Procedure[R]) -> R:
    """Run ``procedure``, performing each call blocking; return what it returns."""
    driver: StepDriver[Call] = StepDriver(procedure)
    while (step := driver.next()) is not None:
        try:
            driver.reply = step.perform()
        except Exception as exc:  # thrown into the procedure, which decides
            driver.error = exc
    result: R = driver.result
    return result
