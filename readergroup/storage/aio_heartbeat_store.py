"""Reader heartbeats on ``redis.asyncio``: :class:`AsyncHeartbeatStore`, the awaitable twin of
:class:`~readergroup.storage.heartbeat_store.RedisHeartbeatStore` (same keys, same
``heartbeat.lua``, the same pure argument building and reply parsing), so an asyncio reader's
heartbeat task beats without blocking its event loop and shares a group with threaded readers.

The script's calls of every store on one client (a factory's readers) that fall in the same
turn of the event loop go to the server as one pipeline
(:class:`~readergroup.storage.aio_script_batches.ScriptBatcher`): each call, its reply and its
errors are the reader's own, as if sent alone."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from readergroup.core.group_state import ReaderRecord
from readergroup.core.log_format import Announcement, announcement_text
from readergroup.core.membership import Renewal
from readergroup.storage import segment_status
from readergroup.storage.aio_script_batches import batcher_of
from readergroup.storage.heartbeat_store import (
    announcements_of,
    beat_args,
    beats_of,
    clients_of,
    heartbeat_keys,
    renew_args,
    renewal_of,
    withdrawn,
)
from readergroup.storage.keys import KeyLayout
from readergroup.storage.scripts import script_source
from readergroup.storage.translate import translate_errors


class AsyncHeartbeatStore:
    """The heartbeats, registered clients and announced log formats of the group whose
    synchronizer is ``sync_name``, on ``client`` (a ``redis.asyncio.Redis`` returning bytes).
    Any number of tasks may use it at once."""

    def __init__(self, client: Redis, keys: KeyLayout, sync_name: str) -> None:
        self._client = client
        self._script = client.register_script(script_source("heartbeat"))
        self._batcher = batcher_of(client)
        self.key, self.clients_key, self.formats_key = heartbeat_keys(keys, sync_name)

    async def beat(
        self, reader_id: str, generation: int, *, claim: bool = False
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        """See :meth:`~readergroup.storage.heartbeat_store.RedisHeartbeatStore.beat`."""
        return beats_of(await self._call(beat_args(reader_id, generation, claim)))

    async def renew(
        self,
        reader_id: str,
        generation: int,
        *,
        session_ms: int,
        judge_every_ms: int,
        judge: bool = False,
    ) -> Renewal:
        """See :meth:`~readergroup.core.membership.HeartbeatStore.renew`."""
        args = renew_args(reader_id, generation, session_ms, judge_every_ms, judge)
        return renewal_of(await self._call(args))

    async def forget(self, reader_id: str, generation: int) -> None:
        """See :meth:`~readergroup.storage.heartbeat_store.RedisHeartbeatStore.forget`."""
        await self._call([reader_id, generation, "forget"])

    async def _call(self, args: list[Any]) -> Any:
        with translate_errors("heartbeat"):
            reply = await self._batcher.call(self._script, [self.key, self.clients_key], args)
        segment_status.check("heartbeat", self.key, reply)
        return reply

    async def register(self, reader_id: str, client: str) -> None:
        """Record ``host/pid`` of ``reader_id`` (a rejoin overwrites it)."""
        with translate_errors("register reader"):
            await self._client.hset(self.clients_key, reader_id, client)

    async def clients(self) -> dict[str, str]:
        with translate_errors("read readers"):
            return clients_of(await self._client.hgetall(self.clients_key))

    async def announce(self, record: ReaderRecord, log_format: int) -> None:
        """Record that the member of ``record`` reads group log formats up to ``log_format``."""
        with translate_errors("announce the reader's log format"):
            text = announcement_text(record, log_format)
            await self._client.hset(self.formats_key, record.reader_id, text)

    async def announcements(self) -> dict[str, Announcement]:
        """Every reader's announcement: reader id -> (generation, joined ms, newest format)."""
        with translate_errors("read the readers' log formats"):
            return announcements_of(await self._client.hgetall(self.formats_key))

    async def withdraw(self, reader_id: str, generation: int) -> None:
        """Delete ``reader_id``'s announcement if it is of ``generation`` or older."""
        with translate_errors("withdraw the reader's log format"):
            if withdrawn(await self.announcements(), reader_id, generation):
                await self._client.hdel(self.formats_key, reader_id)

    async def delete(self) -> None:
        """Delete the heartbeats, the registered clients and the announced formats."""
        with translate_errors("delete reader group"):
            await self._client.delete(self.key, self.clients_key, self.formats_key)
