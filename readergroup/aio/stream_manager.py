"""``AsyncStreamManager``: scopes and streams from asyncio code, never blocking the loop.

The same decisions as the threaded :class:`~readergroup.admin.stream_manager.StreamManager`
(:class:`~readergroup.admin.stream_steps.StreamSteps`' procedures, awaited here), so the same
order of effects, errors, logging and crash repairs; they share streams with threaded clients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from readergroup.admin.stream_steps import StreamInfo, StreamSteps
from readergroup.core.catalog import Catalog
from readergroup.core.config import ClientConfig
from readergroup.core.stream_config import StreamConfiguration
from readergroup.core.stream_cut import StreamCut
from readergroup.core.stream_metadata import StreamState
from readergroup.storage.aio_admin import AsyncAdminConnection
from readergroup.storage.aio_calls import drive_async
from readergroup.storage.aio_connection import AsyncConnection
from readergroup.storage.segment_records import SegmentState
from statesync import Decision

R = TypeVar("R")


class AsyncStreamManager:
    """Administration of scopes and streams, awaited.

    Example::

        async with AsyncStreamManager.from_url(url) as sm:
            await sm.create_scope("shop")
            await sm.create_stream("shop", "orders",
                                   StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))

    ``connection``: an :class:`~readergroup.storage.aio_admin.AsyncAdminConnection` (or the
    memory backend's :class:`~readergroup.testing.aio_memory_admin.AsyncMemoryAdminConnection`).
    Each method awaits :class:`~readergroup.admin.stream_steps.StreamSteps`' procedure of the
    same name (what it does: the threaded manager's method of that name). Use it from one
    event loop.
    """

    def __init__(self, connection: Any, *, owns_connection: bool = False) -> None:
        self._connection = connection
        self._owns_connection = owns_connection
        self.steps = StreamSteps(connection)

    @classmethod
    def from_url(cls, url: str, config: ClientConfig | None = None) -> AsyncStreamManager:
        """A manager on its own connection to ``url`` (connects at the first command)."""
        return cls(
            AsyncAdminConnection(AsyncConnection.from_url(url, config)), owns_connection=True
        )

    @property
    def connection(self) -> Any:
        return self._connection

    async def close(self) -> None:
        if self._owns_connection:
            await close_admin_connection(self._connection)

    async def __aenter__(self) -> AsyncStreamManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- scopes -----------------------------------------------------------------------------
    async def catalog(self, scope: str) -> Catalog:
        return await drive_async(self.steps.catalog(scope))

    async def update_catalog(self, scope: str, generator: Callable[[Catalog], Decision[R]]) -> R:
        return await drive_async(self.steps.update_catalog(scope, generator))

    async def create_scope(self, scope: str) -> bool:
        return await drive_async(self.steps.create_scope(scope))

    async def delete_scope(self, scope: str) -> bool:
        return await drive_async(self.steps.delete_scope(scope))

    async def list_scopes(self) -> list[str]:
        return await drive_async(self.steps.list_scopes())

    async def list_streams(self, scope: str) -> list[str]:
        return await drive_async(self.steps.list_streams(scope))

    # -- streams ----------------------------------------------------------------------------
    async def create_stream(
        self, scope: str, stream: str, config: StreamConfiguration | None = None
    ) -> bool:
        return await drive_async(self.steps.create_stream(scope, stream, config))

    async def stream_state(self, scope: str, stream: str) -> StreamState:
        return await drive_async(self.steps.stream_state(scope, stream))

    async def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        await drive_async(self.steps.update_stream(scope, stream, config))

    async def segment_states(
        self, scope: str, stream: str, segments: Sequence[int]
    ) -> dict[int, SegmentState]:
        return await drive_async(self.steps.segment_states(scope, stream, segments))

    async def complete_scales(self, scope: str, stream: str) -> StreamState:
        return await drive_async(self.steps.complete_scales(scope, stream))

    async def get_stream_info(self, scope: str, stream: str) -> StreamInfo:
        return await drive_async(self.steps.get_stream_info(scope, stream))

    async def head_cut(self, scope: str, stream: str) -> StreamCut:
        return await drive_async(self.steps.head_cut(scope, stream))

    async def tail_cut(self, scope: str, stream: str) -> StreamCut:
        return await drive_async(self.steps.tail_cut(scope, stream))

    async def cut_at_time(self, scope: str, stream: str, server_ms: int) -> StreamCut:
        return await drive_async(self.steps.cut_at_time(scope, stream, server_ms))

    async def scale_stream(
        self,
        scope: str,
        stream: str,
        sealed_segments: Sequence[int],
        new_key_ranges: Sequence[tuple[float, float]],
    ) -> list[int]:
        return await drive_async(
            self.steps.scale_stream(scope, stream, sealed_segments, new_key_ranges)
        )

    async def seal_stream(self, scope: str, stream: str) -> bool:
        return await drive_async(self.steps.seal_stream(scope, stream))

    async def truncate_stream(self, scope: str, stream: str, stream_cut: StreamCut) -> None:
        await drive_async(self.steps.truncate_stream(scope, stream, stream_cut))

    async def check_cut(self, stream_cut: StreamCut) -> None:
        await drive_async(self.steps.check_cut(stream_cut))

    async def delete_stream(self, scope: str, stream: str) -> bool:
        return await drive_async(self.steps.delete_stream(scope, stream))


async def close_admin_connection(connection: Any) -> None:
    """Close an admin connection a manager opened, and the connection under it."""
    await connection.close()
    inner = getattr(connection, "connection", None)
    if inner is not None:
        await inner.close()
