"""An ``XREAD`` sent ahead of need: the request goes out now, its reply is read later.

A reader sends the next read of its segments while the application still has buffered events to
process, so the round trip overlaps that processing (as Kafka's fetcher and Pravega's segment
prefetch do). The request runs on a connection of its own, taken from the blocking client's pool
for as long as the reply is outstanding, so other commands are not held up. Not used in cluster
mode (keys of several slots need several nodes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import redis

from readergroup.storage.multi_read import by_key, xread_command
from readergroup.storage.translate import translate_errors

logger = logging.getLogger(__name__)


class ReadAhead:
    """One ``XREAD COUNT limit`` of ``positions`` (key -> the entry id to read after), sent and
    not yet answered. Call :meth:`result` (or :meth:`cancel`) exactly once.

    ``block`` (seconds, at most :data:`~readergroup.storage.multi_read.MAX_BLOCK_SECONDS`): an
    ``XREAD BLOCK`` that waits on the server for news; an idle reader keeps one outstanding
    across its read calls, so it sends one ``XREAD`` per ``block`` whatever its read timeout (as
    Kafka's fetch request stays in flight across ``poll`` calls)."""

    def __init__(
        self, pool: Any, positions: Mapping[str, str], limit: int, *, block: float | None = None
    ):
        self.positions = dict(positions)
        self._pool = pool
        self._open = True
        with translate_errors("read ahead"):
            self._conn: Any = self._pool.get_connection()
            try:
                self._conn.send_command(*xread_command(self.positions, limit, block))
            except BaseException:
                self._discard()
                raise

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether the reply (or an error) arrives within ``timeout`` s: :meth:`result` will
        not wait then."""
        try:
            return bool(self._conn.can_read(max(0.0, timeout)))
        except (redis.RedisError, OSError):
            return True  # the connection broke: result() raises at once

    def result(self, timeout: float) -> dict[str, Any] | None:
        """The reply as key -> raw entries, or ``None`` if it did not arrive within ``timeout``
        seconds (the request stays outstanding). Raises a ReaderGroupError (the connection is
        then given up)."""
        try:
            with translate_errors("read ahead"):
                if not self._conn.can_read(max(0.0, timeout)):
                    return None
                reply = self._conn.read_response()
        except BaseException:
            self._discard()
            raise
        self._open = False
        self._pool.release(self._conn)
        return by_key(reply)

    def cancel(self) -> None:
        """Give the request up: its connection is closed (the reply may still be on the way).
        Idempotent."""
        self._discard()

    def _discard(self) -> None:
        """Close the connection and give it back, once; the read no longer matches any
        positions (a reader that had parked it sends another)."""
        if not self._open:
            return
        self._open, self.positions = False, {}
        try:
            self._conn.disconnect()
        except (redis.RedisError, OSError) as exc:
            logger.warning("read ahead: closing its connection failed", exc_info=exc)
        self._pool.release(self._conn)
