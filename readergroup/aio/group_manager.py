"""``AsyncReaderGroupManager`` and ``AsyncReaderGroup``: reader groups, checkpoints, resets
and lag from asyncio code, never blocking the loop.

The same decisions as the threaded :class:`~readergroup.admin.group_manager.ReaderGroupManager`
and :class:`~readergroup.admin.group_manager.ReaderGroup` (:mod:`readergroup.admin.group_steps`'
procedures, awaited here): a checkpoint or a reset is awaited on the group's state log
(``XREAD BLOCK`` on a connection of its own), and deleting a group with online readers is
refused unless forced, as there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from readergroup.admin.group_steps import (
    CheckpointResult,
    GroupManagerSteps,
    GroupMetrics,
    GroupSteps,
    ResetResult,
    SegmentDistribution,
    Start,
    watch,
)
from readergroup.aio.stream_manager import close_admin_connection
from readergroup.core.config import ClientConfig
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES, GroupState, SegKey
from readergroup.core.group_view import MemberView
from readergroup.core.stream_cut import StreamCut
from readergroup.storage.aio_admin import AsyncAdminConnection
from readergroup.storage.aio_calls import drive_async
from readergroup.storage.aio_connection import AsyncConnection


class AsyncReaderGroup:
    """A handle on one reader group (from :meth:`AsyncReaderGroupManager.get_reader_group`).
    Each method awaits :class:`~readergroup.admin.group_steps.GroupSteps`' procedure of the
    same name (what it does: the threaded :class:`~readergroup.admin.group_manager.
    ReaderGroup`'s method of that name)."""

    def __init__(self, steps: GroupSteps) -> None:
        self.steps = steps
        self.scope = steps.scope
        self.name = steps.name

    async def refresh(self) -> GroupState:
        return await drive_async(self.steps.refresh())

    async def config(self) -> ReaderGroupConfig:
        return (await self.refresh()).config

    async def server_time_ms(self) -> int:
        return await drive_async(self.steps.streams.server_time_ms())

    async def get_online_readers(self) -> list[str]:
        return sorted((await self.refresh()).readers)

    async def members(self) -> list[MemberView]:
        return await drive_async(self.steps.members())

    async def older_readers_online(self) -> list[str]:
        return await drive_async(self.steps.older_readers_online())

    async def compact_log(self) -> int:
        return await drive_async(self.steps.compact_log())

    async def missing_streams(self) -> list[str]:
        return await drive_async(self.steps.missing_streams())

    async def status(self) -> str:
        return await drive_async(self.steps.status())

    async def get_segment_distribution(self) -> SegmentDistribution:
        return await drive_async(self.steps.get_segment_distribution())

    async def is_end_of_data(self) -> bool:
        return await drive_async(self.steps.is_end_of_data())

    async def get_stream_cuts(self) -> dict[str, StreamCut]:
        return await drive_async(self.steps.get_stream_cuts())

    async def initiate_checkpoint(
        self,
        name: str,
        timeout: float = 30.0,
        *,
        declare_offline: bool = False,
        silent: bool = False,
    ) -> CheckpointResult:
        """Take a group-wide checkpoint; done once every reader online now acknowledged it
        (awaited on the group's log; CheckpointError after ``timeout``)."""
        return await drive_async(
            self.steps.initiate_checkpoint(
                name, timeout, declare_offline=declare_offline, silent=silent
            )
        )

    async def generate_stream_cuts(self, timeout: float = 30.0) -> dict[str, StreamCut]:
        return await drive_async(self.steps.generate_stream_cuts(timeout))

    async def reset_reader_group(
        self, start: Start = None, *, shift_by: int | None = None, timeout: float = 30.0
    ) -> dict[SegKey, int]:
        return await drive_async(
            self.steps.reset_reader_group(start, shift_by=shift_by, timeout=timeout)
        )

    async def apply_reset(
        self, plan: Mapping[SegKey, int], *, timeout: float = 30.0
    ) -> ResetResult:
        return await drive_async(self.steps.apply_reset(plan, timeout=timeout))

    async def plan_reset(
        self,
        start: Start = None,
        *,
        shift_by: int | None = None,
        to_offset: int | None = None,
        streams: Sequence[str] | None = None,
        segments: Sequence[int] | None = None,
    ) -> dict[SegKey, int]:
        return await drive_async(
            self.steps.plan_reset(
                start, shift_by=shift_by, to_offset=to_offset, streams=streams, segments=segments
            )
        )

    async def get_metrics(self) -> GroupMetrics:
        return await drive_async(self.steps.get_metrics())

    def watch(
        self,
        on_segments_changed: Callable[[int], Any] | None = None,
        on_end_of_data: Callable[[], Any] | None = None,
    ) -> AsyncGroupWatcher:
        """Call ``on_segments_changed(count)`` whenever the number of segments the group reads
        (assigned plus unassigned) changes, and ``on_end_of_data()`` once a bounded group is
        done (either may be a coroutine function: it is awaited). A task of the running loop,
        awaiting the group's state log; ``await watcher.stop()`` ends it."""
        return AsyncGroupWatcher(self, on_segments_changed, on_end_of_data)

    async def reader_offline(
        self, reader_id: str, positions: dict[SegKey, int] | None = None
    ) -> bool:
        return await drive_async(self.steps.reader_offline(reader_id, positions))


class _Pause:
    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class AsyncGroupWatcher:
    """A task of the loop running the group watcher's procedure
    (:func:`~readergroup.admin.group_steps.watch`, as the threaded
    :class:`~readergroup.admin.group_manager.GroupWatcher` runs it in a thread) on a
    synchronizer of its own."""

    def __init__(
        self,
        group: AsyncReaderGroup,
        on_segments_changed: Callable[[int], Any] | None,
        on_end_of_data: Callable[[], Any] | None,
    ) -> None:
        steps = group.steps
        sync = steps.connection.synchronizer(steps.sync.name, UPDATE_TYPES, STATE_TYPES)
        self._stopped = False
        procedure = watch(sync, on_segments_changed, on_end_of_data, _Pause(), self._is_stopped)
        self._task = asyncio.get_running_loop().create_task(
            drive_async(procedure), name=f"rg-watch-{group.name}"
        )

    def _is_stopped(self) -> bool:
        return self._stopped

    async def stop(self) -> None:
        """End the watch (at once, or at the end of its current wait if the cancellation
        is lost: Python 3.11's ``asyncio.wait_for`` can drop one that races a wake-up); a
        cancellation of the caller still reaches the caller."""
        self._stopped = True
        self._task.cancel()
        await asyncio.wait([self._task])


class AsyncReaderGroupManager:
    """Creates, lists and deletes the reader groups of one scope, awaited.

    Example::

        async with AsyncReaderGroupManager.from_url("shop", url) as rgm:
            await rgm.create_reader_group("billing", ReaderGroupConfig(streams=["shop/orders"]))
            group = await rgm.get_reader_group("billing")
            checkpoint = await group.initiate_checkpoint("nightly", timeout=30)

    ``connection``: as :class:`~readergroup.aio.stream_manager.AsyncStreamManager`'s.
    ``clock``: the monotonic clock checkpoint and reset timeouts are measured on.
    """

    def __init__(
        self,
        scope: str,
        connection: Any,
        *,
        owns_connection: bool = False,
        writer_label: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.steps = GroupManagerSteps(scope, connection, writer_label)
        self.scope = self.steps.scope
        self._connection = connection
        self._owns_connection = owns_connection
        self._clock = clock

    @classmethod
    def from_url(
        cls,
        scope: str,
        url: str,
        config: ClientConfig | None = None,
        *,
        writer_label: str | None = None,
    ) -> AsyncReaderGroupManager:
        """A manager on its own connection to ``url`` (connects at the first command)."""
        connection = AsyncAdminConnection(AsyncConnection.from_url(url, config))
        return cls(scope, connection, owns_connection=True, writer_label=writer_label)

    async def close(self) -> None:
        if self._owns_connection:
            await close_admin_connection(self._connection)

    async def __aenter__(self) -> AsyncReaderGroupManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def create_reader_group(self, name: str, config: ReaderGroupConfig) -> bool:
        """Create group ``name``; ``False`` if it existed (its configuration is kept)."""
        return await drive_async(self.steps.create_reader_group(name, config))

    async def get_reader_group(self, name: str) -> AsyncReaderGroup:
        """A handle on group ``name``; ReaderGroupNotFoundError if it does not exist."""
        group = AsyncReaderGroup(self.steps.group(name, self._clock))
        await group.refresh()
        return group

    async def list_reader_groups(self) -> list[str]:
        return await drive_async(self.steps.list_reader_groups())

    async def delete_reader_group(self, name: str, *, force: bool = False) -> bool:
        """Delete the group's state and heartbeats; ``False`` if it did not exist. Refused
        with ReaderGroupInUseError while it has online readers, unless ``force``."""
        return await drive_async(self.steps.delete_reader_group(name, force=force))
