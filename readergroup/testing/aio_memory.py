"""The memory backend for the asyncio layer: :class:`AsyncMemoryConnection` awaits the calls
of a :class:`~readergroup.testing.memory_connection.MemoryConnection` (in-process, they never
wait on I/O), so asyncio writers and threaded clients of one memory connection share its
streams, as they share a Redis."""

from __future__ import annotations

from collections.abc import Sequence

from readergroup.core.config import ClientConfig
from readergroup.storage.aio_connection_api import AsyncAppends, AsyncConnectionApi
from readergroup.storage.segment_records import AppendBatch, AppendReply, SegmentState
from readergroup.storage.segment_store import SegmentStorage
from readergroup.testing.memory_connection import MemoryConnection
from statesync.backend import ReadResult


class _Appends:
    def __init__(self, segments: SegmentStorage) -> None:
        self._segments = segments

    async def append(self, batches: Sequence[AppendBatch]) -> list[AppendReply]:
        return self._segments.append(batches)

    async def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        return self._segments.segment_states(scope, stream, segments)

    async def seal_segments(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, int]:
        return self._segments.seal_segments(scope, stream, segments)

    async def open_segments(self, scope: str, stream: str, segments: Sequence[int]) -> list[int]:
        return self._segments.open_segments(scope, stream, segments)


class AsyncMemoryConnection:
    """An asyncio view of ``memory`` (it does not own it: closing this leaves it open)."""

    def __init__(self, memory: MemoryConnection) -> None:
        self.memory = memory
        self.config: ClientConfig = memory.config
        self._segments = _Appends(memory.segments)

    @property
    def segments(self) -> AsyncAppends:
        return self._segments

    async def read_log(self, name: str, after_revision: int, limit: int) -> ReadResult:
        return self.memory.log_backend.read(name, after_revision, limit)

    async def close(self) -> None:
        return None


def _conforms(connection: AsyncMemoryConnection) -> AsyncConnectionApi:
    """mypy checks here that the memory connection has the asyncio interface."""
    return connection
