"""The memory backend's segment reads for the asyncio reader: :class:`AsyncMemoryReads`, the
twin of :class:`~readergroup.storage.aio_reads.AsyncSegmentReads` over a
:class:`~readergroup.testing.memory_connection.MemoryConnection` (its segments and state logs),
so asyncio readers and threaded ones of one memory connection read the same data.

A blocking read (``XREAD BLOCK``'s twin) never blocks the event loop: it watches the memory
connection (:meth:`~readergroup.testing.memory_connection.MemoryConnection.watching`) and is
woken, through ``call_soon_threadsafe``, by whichever thread or task appends to a segment or a
state log (:func:`~statesync.watched_condition.wait_for_news`); it never polls. Every read
yields to the loop once first, as a round trip to Redis does, so a read is a point where a
task may be cancelled and a reader reading buffered data does not starve the loop; a read takes
nothing (the memory data stays), so a cancelled one loses nothing. Reads started with
:meth:`AsyncMemoryReads.start` run in tasks of their own and outlive a cancelled caller
(:class:`~readergroup.storage.aio_reads.AsyncPendingRead`, as on Redis).

What memory cannot represent it does not pretend to: one "server" never fails over (epoch 0
only, nothing lost), and no key holds a value of another type (nothing can write one), so
:class:`~readergroup.core.errors.WrongKeyTypeError` is never raised here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from readergroup.storage.aio_reads import AsyncPendingRead
from readergroup.storage.multi_read import MAX_BLOCK_SECONDS
from readergroup.storage.segment_records import SegmentState
from readergroup.testing.memory_connection import MemoryConnection
from statesync.watched_condition import wait_for_news


class AsyncMemoryReads:
    """Reads of ``memory``'s segments and state logs, awaited."""

    cluster = False
    """(One store: never a cluster's.)"""

    def __init__(self, memory: MemoryConnection) -> None:
        self._memory = memory
        self._segments = memory.segments

    async def read_keys(
        self, positions: Mapping[str, str], timeout: float, limit: int
    ) -> dict[str, Any]:
        """Entries after ``positions`` of segments and state logs (key -> raw entries of the
        keys that had something), waiting up to ``timeout`` s (at most 5) for any."""
        if not positions:
            return {}
        return await self.xread(positions, limit, timeout)

    async def xread(
        self, positions: Mapping[str, str], limit: int, block: float | None = None
    ) -> dict[str, Any]:
        """At most ``limit`` entries of each key after ``positions``; ``block``: waiting up to
        that many seconds (at most 5) for any."""
        await asyncio.sleep(0)  # (the round trip's turn of the loop)
        memory = self._memory

        def look() -> dict[str, Any]:
            return memory.read_now(positions, limit)

        if block is None:
            return look()
        return await wait_for_news(memory.watching, look, min(block, MAX_BLOCK_SECONDS))

    def start(
        self, positions: Mapping[str, str], limit: int, block: float | None = None
    ) -> AsyncPendingRead:
        """Start :meth:`xread` in a task of its own now; its reply is awaited later."""
        return AsyncPendingRead(
            positions, asyncio.ensure_future(self.xread(positions, limit, block))
        )

    async def epochs(self, scope: str, stream: str, segment: int) -> list[tuple[int, int]]:
        await asyncio.sleep(0)
        return self._segments.epochs(scope, stream, segment)

    async def epoch_histories(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, tuple[int, list[tuple[int, int]]]]:
        await asyncio.sleep(0)
        return self._segments.epoch_histories(scope, stream, segments)

    async def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        await asyncio.sleep(0)
        return self._segments.segment_states(scope, stream, segments)

    async def lost_in_failover(
        self, scope: str, stream: str, segment: int, begin: int, end: int
    ) -> bool:
        await asyncio.sleep(0)
        return self._segments.lost_in_failover(scope, stream, segment, begin, end)

    async def read_raw(
        self, scope: str, stream: str, segment: int, start: int, stop: int, limit: int
    ) -> Any:
        await asyncio.sleep(0)
        return self._segments.read_raw(scope, stream, segment, start, stop, limit)
