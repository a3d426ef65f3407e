"""Reader heartbeats on Redis: :class:`RedisHeartbeatStore`, one group's heartbeat hash beside
its state (same hash tag), stamped by the server's clock inside ``heartbeat.lua``, the
``host/pid`` each reader registered when it joined, and the log format each announced (see
:mod:`readergroup.core.log_format`). The in-memory twin for simulations is
:class:`~readergroup.testing.memory_heartbeats.MemoryHeartbeatStore`; both implement
:class:`~readergroup.core.membership.HeartbeatStore`. The asyncio twin,
:class:`~readergroup.storage.aio_heartbeat_store.AsyncHeartbeatStore`, shares this module's pure
parts: the script's arguments (:func:`beat_args`, :func:`renew_args`) and the parsing of its
replies and of the hashes (:func:`beats_of`, :func:`renewal_of`, :func:`clients_of`,
:func:`announcements_of`, :func:`withdrawn`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis
from redis.commands.core import Script

from readergroup.core.group_state import ReaderRecord
from readergroup.core.log_format import Announcement, announcement_text, parse_announcements
from readergroup.core.membership import Renewal
from readergroup.storage import segment_status
from readergroup.storage.keys import KeyLayout
from readergroup.storage.translate import as_text, translate_errors


class RedisHeartbeatStore:
    """The heartbeats and registered clients of the group whose synchronizer is ``sync_name``.
    Thread-safe."""

    def __init__(
        self,
        client: redis.Redis,
        scripts: Mapping[str, Script],
        keys: KeyLayout,
        sync_name: str,
    ) -> None:
        self._client = client
        self._script = scripts["heartbeat"]
        self.key, self.clients_key, self.formats_key = heartbeat_keys(keys, sync_name)

    def beat(
        self, reader_id: str, generation: int, *, claim: bool = False
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        """Renew ``reader_id``'s heartbeat unless a newer generation holds it (``claim``: write
        whatever is stored; ``reader_id=""``: change none); return the server time and every
        reader's ``(generation, server ms)``."""
        return beats_of(self._call(beat_args(reader_id, generation, claim)))

    def renew(
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
        return renewal_of(self._call(args))

    def forget(self, reader_id: str, generation: int) -> None:
        """Delete ``reader_id``'s heartbeat and registered client if its heartbeat is of
        ``generation`` or older (one atomic step: the reader left or was removed for good)."""
        self._call([reader_id, generation, "forget"])

    def _call(self, args: list[Any]) -> Any:
        with translate_errors("heartbeat"):
            reply = self._script(keys=[self.key, self.clients_key], args=args)
        segment_status.check("heartbeat", self.key, reply)
        return reply

    def register(self, reader_id: str, client: str) -> None:
        """Record ``host/pid`` of ``reader_id`` (kept until it leaves or is removed, see
        :meth:`forget`; a rejoin overwrites it)."""
        with translate_errors("register reader"):
            self._client.hset(self.clients_key, reader_id, client)

    def clients(self) -> dict[str, str]:
        with translate_errors("read readers"):
            return clients_of(self._client.hgetall(self.clients_key))

    def announce(self, record: ReaderRecord, log_format: int) -> None:
        """Record that the member of ``record`` reads group log formats up to ``log_format``
        (see :mod:`readergroup.core.log_format`)."""
        with translate_errors("announce the reader's log format"):
            text = announcement_text(record, log_format)
            self._client.hset(self.formats_key, record.reader_id, text)

    def announcements(self) -> dict[str, Announcement]:
        """Every reader's announcement: reader id -> (generation, joined ms, newest format)."""
        with translate_errors("read the readers' log formats"):
            return announcements_of(self._client.hgetall(self.formats_key))

    def withdraw(self, reader_id: str, generation: int) -> None:
        """Delete ``reader_id``'s announcement if it is of ``generation`` or older. (Read, then
        deleted: a newer incarnation announcing in between loses its announcement, which only
        keeps the group on the older format until its next join.)"""
        with translate_errors("withdraw the reader's log format"):
            if withdrawn(self.announcements(), reader_id, generation):
                self._client.hdel(self.formats_key, reader_id)

    def delete(self) -> None:
        """Delete the heartbeats, the registered clients and the announced formats (the group
        is being deleted)."""
        with translate_errors("delete reader group"):
            self._client.delete(self.key, self.clients_key, self.formats_key)


def heartbeat_keys(keys: KeyLayout, sync_name: str) -> tuple[str, str, str]:
    """A group's heartbeats, registered clients and announced formats keys (one hash tag)."""
    return (
        keys.heartbeats(sync_name),
        keys.reader_clients(sync_name),
        keys.reader_formats(sync_name),
    )


def beat_args(reader_id: str, generation: int, claim: bool) -> list[Any]:
    """``heartbeat.lua``'s ARGV for a beat (``claim``: write whatever is stored)."""
    return [reader_id, generation, "claim" if claim else "beat"]


def renew_args(
    reader_id: str, generation: int, session_ms: int, judge_every_ms: int, judge: bool
) -> list[Any]:
    """``heartbeat.lua``'s ARGV for a renewal."""
    return [reader_id, generation, "renew", session_ms, judge_every_ms, "1" if judge else ""]


def beats_of(reply: Any) -> tuple[int, dict[str, tuple[int, int]]]:
    """A beat's reply: the server time and every reader's ``(generation, server ms)``."""
    return int(reply[1]), _beats(reply[2])


def renewal_of(reply: Any) -> Renewal:
    """A renewal's reply (every heartbeat only when this member judged expiries)."""
    beats = _beats(reply[2]) if int(reply[4]) else None
    return Renewal(int(reply[1]), _entry(reply[3]), beats)


def clients_of(raw: Mapping[Any, Any]) -> dict[str, str]:
    """The registered clients' hash as text."""
    return {as_text(k): as_text(v) for k, v in raw.items()}


def announcements_of(raw: Mapping[Any, Any]) -> dict[str, Announcement]:
    """The announced formats' hash, parsed (see :mod:`readergroup.core.log_format`)."""
    return parse_announcements(clients_of(raw))


def withdrawn(announced: Mapping[str, Announcement], reader_id: str, generation: int) -> bool:
    """Whether ``reader_id``'s announcement goes when its ``generation`` leaves (it is of that
    generation or older)."""
    stored = announced.get(reader_id)
    return stored is not None and stored[0] <= generation


def _entry(value: bytes) -> tuple[int, int] | None:
    """``b"<generation> <ms>"`` as a pair; ``None`` for a missing or malformed entry."""
    generation_text, _, ms_text = value.partition(b" ")
    try:
        return int(generation_text), int(ms_text)
    except ValueError:
        return None


def _beats(flat: list[bytes]) -> dict[str, tuple[int, int]]:
    """The hash as reader id -> ``(generation, ms)``; a malformed row (or the ``~due`` field)
    is left out: that reader then looks silent."""
    beats: dict[str, tuple[int, int]] = {}
    for name, value in zip(flat[::2], flat[1::2], strict=False):
        entry = _entry(value)
        if entry is not None:
            beats[name.decode()] = entry
    return beats
