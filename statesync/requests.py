"""What the synchronizer's core asks of the outside world, and the drivers that answer it.

The core (:mod:`statesync.core`) does no I/O: each of its operations is a generator that
yields requests and receives their replies (h11 style). A :class:`BackendCall` names one
method of a :class:`~statesync.backend.LogBackend` (or of its async twin) and its arguments;
the driver calls it and sends the reply back, or throws the exception it raised into the
generator (so the core's own ``try``/``except`` decides what an error means). A
:class:`Sleep` is a backoff delay the core drew from its injected clock and random source.

Two drivers: :func:`run` here (threads: blocking calls, the clock's ``sleep``) and
:func:`statesync.aio_synchronizer.run_async` (one event loop: awaited calls, an awaitable
sleep); both hand requests out and replies in through :class:`Steps`. A driver stopped
between two requests (an async driver's task cancelled while a call is in flight) closes the
generator at its ``yield``: the core only changes its state between yields, so whatever it
holds then is consistent.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from statesync.clock import Clock

T = TypeVar("T")

BackendMethod: TypeAlias = Literal[
    "initialize", "append", "wake", "read", "wait", "compact", "delete"
]


@dataclass(frozen=True, slots=True)
class BackendCall:
    """Call ``backend.<method>(*args, **kwargs)``; the reply is sent back to the core."""

    method: BackendMethod
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` (a backoff the core drew) before resuming the core."""

    seconds: float


Request: TypeAlias = BackendCall | Sleep
Operation: TypeAlias = Generator[Request, Any, T]
"""One operation of the core: yields requests, receives replies, returns its result."""


class Steps(Generic[T]):
    """One operation being driven: hands out its requests and takes their outcomes."""

    def __init__(self, operation: Operation[T]) -> None:
        self._operation = operation
        self.reply: Any = None
        self.error: Exception | None = None
        self.result: T

    def next_request(self) -> Request | None:
        """Send the last reply (or throw the last error) in; the next request, or ``None``
        once the operation returned (its value is :attr:`result`)."""
        reply, error, self.reply, self.error = self.reply, self.error, None, None
        try:
            if error is not None:
                return self._operation.throw(error)
            return self._operation.send(reply)
        except StopIteration as done:
            self.result = done.value
            return None


def run(operation: Operation[T], backend: Any, clock: Clock) -> T:
    """Drive ``operation`` to its end on a (blocking) :class:`~statesync.backend.LogBackend`."""
    steps = Steps(operation)
    with closing(operation):
        while (request := steps.next_request()) is not None:
            try:
                if isinstance(request, Sleep):
                    clock.sleep(request.seconds)
                else:
                    steps.reply = getattr(backend, request.method)(*request.args, **request.kwargs)
            except Exception as exc:  # handed to the core, which decides what it means
                steps.error = exc
    return steps.result
