"""``AsyncRetentionManager``: retention from asyncio code, never blocking the loop: the
decisions of :class:`~readergroup.admin.retention.RetentionManager`
(:class:`~readergroup.admin.retention.RetentionSteps`, awaited here); see
:mod:`readergroup.admin.retention` for what is deleted and what is kept."""

from __future__ import annotations

from readergroup.admin.retention import RetentionSteps
from readergroup.aio.stream_manager import AsyncStreamManager
from readergroup.core.stream_cut import StreamCut
from readergroup.storage.aio_calls import drive_async


class AsyncRetentionManager:
    """Computes and applies retention for streams, awaited, on ``manager``'s connection."""

    def __init__(self, manager: AsyncStreamManager) -> None:
        self.steps = RetentionSteps(manager.steps)

    async def publish(self, scope: str, stream: str, subscriber: str, cut: StreamCut) -> None:
        """Record ``subscriber``'s position so retention keeps what it has not passed."""
        await drive_async(self.steps.publish(scope, stream, subscriber, cut))

    async def unsubscribe(self, scope: str, stream: str, subscriber: str) -> None:
        await drive_async(self.steps.unsubscribe(scope, stream, subscriber))

    async def subscriber_cuts(self, scope: str, stream: str) -> dict[str, StreamCut | None]:
        return await drive_async(self.steps.subscriber_cuts(scope, stream))

    async def truncation_cut(self, scope: str, stream: str) -> StreamCut | None:
        return await drive_async(self.steps.truncation_cut(scope, stream))

    async def apply(self, scope: str, stream: str) -> StreamCut | None:
        """Truncate ``scope/stream`` as far as its policy and subscribers allow; the cut
        truncated at (``None``: nothing was deleted)."""
        return await drive_async(self.steps.apply(scope, stream))
