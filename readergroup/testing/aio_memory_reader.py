"""The memory backend's reader side for the asyncio reader: :class:`AsyncMemoryReaderConnection`,
the twin of :class:`~readergroup.storage.aio_reader_connection.AsyncRedisReaderConnection` over
a :class:`~readergroup.testing.memory_connection.MemoryConnection`: asyncio synchronizers on
its very logs (the :class:`~statesync.aio_memory_backend.AsyncMemoryLogBackend` of the
factory's :class:`~readergroup.testing.aio_memory_admin.AsyncMemoryAdminConnection`), its
segment reads (:class:`~readergroup.testing.aio_memory_reads.AsyncMemoryReads`) and its groups'
heartbeats (:class:`AsyncMemoryHeartbeats`). So threaded and asyncio readers of one memory
connection form one group, as they do on one Redis."""

from __future__ import annotations

from readergroup.core.config import ClientConfig
from readergroup.core.group_state import ReaderRecord
from readergroup.core.log_format import Announcement
from readergroup.core.membership import Renewal
from readergroup.storage.aio_connection_api import AsyncAppends
from readergroup.storage.aio_reader_connection import AsyncReaderConnection
from readergroup.storage.aio_synchronizers import AsyncSynchronizers
from readergroup.storage.keys import KeyLayout
from readergroup.testing.aio_memory import AsyncMemoryConnection
from readergroup.testing.aio_memory_admin import AsyncMemoryAdminConnection
from readergroup.testing.aio_memory_reads import AsyncMemoryReads
from readergroup.testing.memory_heartbeats import MemoryHeartbeatStore


class AsyncMemoryHeartbeats:
    """A :class:`MemoryHeartbeatStore`'s calls, awaited (in-process: they never wait)."""

    def __init__(self, store: MemoryHeartbeatStore) -> None:
        self._store = store

    async def beat(
        self, reader_id: str, generation: int, *, claim: bool = False
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        return self._store.beat(reader_id, generation, claim=claim)

    async def renew(
        self,
        reader_id: str,
        generation: int,
        *,
        session_ms: int,
        judge_every_ms: int,
        judge: bool = False,
    ) -> Renewal:
        return self._store.renew(
            reader_id, generation, session_ms=session_ms, judge_every_ms=judge_every_ms, judge=judge
        )

    async def forget(self, reader_id: str, generation: int) -> None:
        self._store.forget(reader_id, generation)

    async def register(self, reader_id: str, client: str) -> None:
        self._store.register(reader_id, client)

    async def clients(self) -> dict[str, str]:
        return self._store.clients()

    async def announce(self, record: ReaderRecord, log_format: int) -> None:
        self._store.announce(record, log_format)

    async def announcements(self) -> dict[str, Announcement]:
        return self._store.announcements()

    async def withdraw(self, reader_id: str, generation: int) -> None:
        self._store.withdraw(reader_id, generation)

    async def delete(self) -> None:
        self._store.delete()


class AsyncMemoryReaderConnection(AsyncSynchronizers):
    """The reader side of an :class:`AsyncMemoryConnection`, sharing the asyncio log backend
    and synchronizer configuration of ``admin`` (the factory's managers' view of the same
    memory). It owns nothing: closing it leaves the memory as it is."""

    def __init__(self, connection: AsyncMemoryConnection, admin: AsyncMemoryAdminConnection):
        memory = connection.memory
        self._memory = memory
        self._segments = connection.segments
        self._reads = AsyncMemoryReads(memory)
        self.log_backend = admin.log_backend
        self.sync_config = admin.sync_config

    @property
    def config(self) -> ClientConfig:
        return self._memory.config

    @property
    def keys(self) -> KeyLayout:
        return self._memory.keys

    @property
    def segments(self) -> AsyncAppends:
        return self._segments

    @property
    def reads(self) -> AsyncMemoryReads:
        return self._reads

    def wake_on(self, sync_name: str, after_revision: int, *, wakes_only: bool) -> tuple[str, str]:
        return self._memory.wake_on(sync_name, after_revision, wakes_only=wakes_only)

    def follower_wake_on(
        self, sync_name: str, after_revision: int, follower: str
    ) -> tuple[str, str]:
        return self._memory.follower_wake_on(sync_name, after_revision, follower)

    def primary_switches(self) -> int:
        """Always 0: the memory has no primary to switch."""
        return 0

    def heartbeat_store(self, sync_name: str) -> AsyncMemoryHeartbeats:
        """The heartbeats of the group whose synchronizer is ``sync_name`` (the ones threaded
        readers of the memory connection beat in)."""
        return AsyncMemoryHeartbeats(self._memory.heartbeat_store(sync_name))

    async def close(self) -> None:
        return None


def _conforms(connection: AsyncMemoryReaderConnection) -> AsyncReaderConnection:
    """mypy checks here that the memory reader side has the asyncio reader's interface."""
    return connection
