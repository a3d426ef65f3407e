"""The format a reader group's log is appended in: :class:`NegotiatedFormat`, the
``entry_version`` of every group synchronizer a connection opens (see
:mod:`readergroup.core.log_format` for the rule, and :mod:`statesync.codec` for the formats).

It reads the readers' announcements from the group's ``:formats`` hash only when the state's
members may have changed what it allows: once every member announced the newest format under
its current generation nothing is read again until the members change; otherwise (some member
reads an older format, or has not announced yet: it announces right after its join) at most
once per :data:`REFRESH_SECONDS` and on each change of members. An unreadable hash keeps the
older format (safe for every member), with a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from readergroup.core.errors import ReaderGroupError
from readergroup.core.group_state import GroupState, ReaderRecord
from readergroup.core.log_format import NEWEST_FORMAT, UNANNOUNCED_FORMAT, negotiated_format
from readergroup.core.membership import HeartbeatStore

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 1.0
"""Least seconds between two reads of the announcements while the members stay the same."""


class NegotiatedFormat:
    """``state -> format`` for a group synchronizer's appends (called under its lock)."""

    def __init__(
        self,
        store: HeartbeatStore,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._refresh = refresh_seconds
        self._clock = clock
        self._announced: dict[str, tuple[int, int, int]] = {}
        self._read_at: float | None = None
        self._read_for: frozenset[ReaderRecord] = frozenset()
        self._newest_for: object = None
        """The members map last found to read the newest format (states share it until the
        members change: a commit then costs no pass over the members)."""

    def __call__(self, state: GroupState) -> int:
        readers = state.readers
        if readers is self._newest_for:
            return NEWEST_FORMAT
        found = negotiated_format(readers, self._announced)
        if found == NEWEST_FORMAT:
            self._newest_for = readers
        if not readers or found == NEWEST_FORMAT:
            return found
        members = frozenset(readers.values())
        now = self._clock()
        due = self._read_at is None or now - self._read_at >= self._refresh
        if not due and members == self._read_for:
            return found
        self._read_at, self._read_for = now, members
        try:
            self._announced = self._store.announcements()
        except ReaderGroupError as exc:
            logger.warning(
                "could not read the readers' log formats; appending in format %d, which "
                "every supported version reads: %s",
                UNANNOUNCED_FORMAT,
                exc,
                exc_info=exc,
            )
            self._announced = {}
        return negotiated_format(readers, self._announced)
