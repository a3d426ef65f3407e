"""What the asyncio layer uses of a connection, as a Protocol:
:class:`~readergroup.storage.aio_connection.AsyncConnection` on Redis and
:class:`~readergroup.testing.aio_memory.AsyncMemoryConnection` in memory (so the asyncio
writer's tests run on both backends, as the threaded writer's do)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from readergroup.core.config import ClientConfig
from readergroup.storage.segment_records import AppendBatch, AppendReply, SegmentState
from statesync.backend import ReadResult


class AsyncAppends(Protocol):
    """Segment appends, awaited (see :meth:`~readergroup.storage.segment_store.SegmentStore.
    append` for what a reply means), and what completing an interrupted scale needs (the
    same methods of :class:`~readergroup.storage.segment_store.SegmentStorage`, awaited)."""

    async def append(self, batches: Sequence[AppendBatch]) -> list[AppendReply]: ...

    async def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]: ...

    async def seal_segments(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, int]: ...

    async def open_segments(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> list[int]: ...


class AsyncConnectionApi(Protocol):
    """One backend's appends and state-log reads, shared by everything an asyncio factory
    creates."""

    config: ClientConfig

    @property
    def segments(self) -> AsyncAppends: ...

    async def read_log(self, name: str, after_revision: int, limit: int) -> ReadResult:
        """One page of a state log (statesync's
        :class:`~statesync.errors.SynchronizerNotFoundError` when it does not exist)."""
        ...

    async def close(self) -> None: ...
