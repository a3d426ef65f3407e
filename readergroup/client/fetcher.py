"""The data side of a threaded reader: :class:`Fetcher`, which runs the plans of
:class:`~readergroup.client.fetch_core.FetchCore` (every decision: buffers, contiguity, read-ahead
accounting, hand-out) with blocking I/O on a :class:`~readergroup.storage.connection_api.
Connection`.

``fetch`` runs one ``XREAD BLOCK`` over every segment with room in its buffer plus the state logs
the session wants to be woken by; ``take`` hands buffered events out, round-robin over segments;
``take_one`` is the per-event fast path. Its blocking waits let go of the reader's hand-out gate
(``unlocked``). The asyncio twin is :class:`~readergroup.client.aio_fetcher.AsyncFetcher`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar, cast

from readergroup.client.fetch_core import (
    IDLE_CHECK_SESSIONS,
    MAX_READS_AHEAD,
    PARK_GRACE,
    PARK_MIN_BLOCK,
    SHORT_LOG_RECHECK,
    Ask,
    Effect,
    FetchCore,
    FetchOutcome,
    LogLook,
    Outage,
    OwnedSegment,
    Pause,
    Plan,
    Read,
    Ready,
    Receive,
    Start,
    advance,
    divergence,
)
from readergroup.client.serializers import Serializer
from readergroup.core.group_config import ReaderConfig
from readergroup.core.group_state import SegKey
from readergroup.storage.connection_api import Connection, PendingRead
from statesync.clock import Clock

__all__ = [
    "IDLE_CHECK_SESSIONS",
    "MAX_READS_AHEAD",
    "PARK_GRACE",
    "PARK_MIN_BLOCK",
    "SHORT_LOG_RECHECK",
    "FetchOutcome",
    "Fetcher",
    "LogLook",
    "Outage",
    "OwnedSegment",
    "divergence",
]

T = TypeVar("T")
R = TypeVar("R")


class Fetcher(FetchCore[T]):
    """Buffers, reads and hands out the events of a reader's owned segments, on a blocking
    connection (the reading thread runs it; the maintenance thread only :meth:`histories`)."""

    def __init__(
        self,
        connection: Connection,
        serializer: Serializer[T],
        config: ReaderConfig,
        outage: Outage,
        clock: Clock,
    ) -> None:
        super().__init__(
            serializer,
            config,
            outage,
            clock,
            cluster=connection.cluster,
            switches=connection.primary_switches(),
        )
        self._connection = connection
        self.unlocked: Callable[[], AbstractContextManager[Any]] = nullcontext
        """Wraps every blocking wait of :meth:`fetch`: the reader lets go of its hand-out
        gate's lock there (see :mod:`~readergroup.client.maintenance`)."""

    def fetch(self, block: float, logs: Mapping[str, str], *, hold: float = 0.0) -> FetchOutcome:
        """See :meth:`FetchCore.plan_fetch`."""
        switches = self._connection.primary_switches()
        return self._run(self.plan_fetch(block, logs, hold, switches))

    def collect(self, timeout: float) -> bool:
        """See :meth:`FetchCore.plan_collect`."""
        return self._run(self.plan_collect(timeout))

    def read_ahead(self) -> None:
        """See :meth:`FetchCore.plan_read_ahead`."""
        self._run(self.plan_read_ahead())

    def check_idle(self) -> None:
        """See :meth:`FetchCore.plan_check_idle`."""
        self._run(self.plan_check_idle())

    def verify(self, keys: Iterable[SegKey]) -> list[SegKey]:
        """See :meth:`FetchCore.plan_verify`."""
        return self._run(self.plan_verify(keys))

    def histories(
        self, segments: Sequence[OwnedSegment]
    ) -> dict[SegKey, tuple[int, list[tuple[int, int]]]]:
        """See :meth:`FetchCore.plan_histories` (any thread: it reads nothing else)."""
        return self._run(self.plan_histories(segments))

    def _refill(self) -> bool:
        return self.collect(0.0)

    def _run(self, plan: Plan[R]) -> R:
        done, value = advance(plan, None, None)
        while not done:
            try:
                outcome, error = self._perform(value), None
            except BaseException as exc:  # thrown into the plan, which decides
                outcome, error = None, exc
            done, value = advance(plan, outcome, error)
        result: R = value
        return result

    def _perform(self, effect: Effect) -> Any:
        connection = self._connection
        if isinstance(effect, Ask):
            return getattr(connection.segments, effect.method)(*effect.args)
        if isinstance(effect, Start):
            return connection.read_ahead(effect.positions, effect.limit, block=effect.block)
        with self.unlocked() if isinstance(effect, Pause) or effect.wait else nullcontext():
            if isinstance(effect, Read):
                return connection.read_keys(effect.positions, effect.block, effect.limit)
            if isinstance(effect, Ready):
                return cast(PendingRead, effect.read).ready(effect.timeout)
            if isinstance(effect, Receive):
                return cast(PendingRead, effect.read).result(effect.timeout)
            self._clock.sleep(effect.seconds)
            return None
