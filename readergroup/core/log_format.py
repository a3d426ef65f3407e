"""Which format a reader group's log is written in while readers of several versions share it
(a rolling upgrade). Pure code.

Every reader announces the newest log entry format it reads (:data:`NEWEST_FORMAT`, a
:mod:`statesync.codec` format version) beside the group's heartbeats, under its membership
record (generation and join time), right after it joins. Whoever appends to the group's log
writes the format every current member reads: the lowest any member announced, where a member
that announced nothing (or under another record: an earlier incarnation of its id, or a member
of a deleted group of the same name) counts as a reader of :data:`UNANNOUNCED_FORMAT`, what the
versions from before announcements read (Kafka's protocol version negotiation, with the log as
coordinator). So entries switch to the newer format only once every member runs a version that
reads it, and back as soon as an older one joins.

A group with no members is written in :data:`UNANNOUNCED_FORMAT` too: an older reader may be the
next to join, and it reads every entry since the log's last snapshot.

>>> from readergroup.core.group_state import ReaderRecord
>>> readers = {"a": ReaderRecord("a", 4, 100), "b": ReaderRecord("b", 5, 200)}
>>> negotiated_format(readers, {"a": (4, 100, 3), "b": (5, 200, 3)})
3
>>> negotiated_format(readers, {"a": (4, 100, 3), "b": (2, 200, 3)})   # b's is stale
2
>>> older_members(readers, {"a": (4, 100, 3)})
['b']
"""

from __future__ import annotations

from collections.abc import Mapping

from readergroup.core.group_state import ReaderRecord
from statesync.codec import FORMAT_VERSION

NEWEST_FORMAT = FORMAT_VERSION
"""The newest group log format this version reads and announces."""

UNANNOUNCED_FORMAT = 2
"""What a member that announced nothing reads: the versions before announcements (up to
26dd67a) read formats 1 and 2, and refuse a field or an update type they do not know."""

Announcement = tuple[int, int, int]
"""(membership generation, join time ms, newest format it reads): the member's record (see
:class:`~readergroup.core.group_state.ReaderRecord`) and what it reads."""

Announcements = Mapping[str, Announcement]
"""reader id -> its announcement."""


def announcement_text(record: ReaderRecord, log_format: int) -> str:
    """How an announcement is stored: ``"<generation> <joined ms> <format>"``."""
    return f"{record.generation} {record.joined_ms} {log_format}"


def parse_announcements(raw: Mapping[str, str]) -> dict[str, Announcement]:
    """The stored announcements; a malformed one is left out (that reader then counts as
    unannounced, which only keeps the older format).

    >>> parse_announcements({"a": "4 100 3", "b": "x", "c": "1 2"})
    {'a': (4, 100, 3)}
    """
    parsed: dict[str, Announcement] = {}
    for reader_id, text in raw.items():
        parts = text.split(" ")
        if len(parts) == 3 and all(part.isdigit() for part in parts):
            parsed[reader_id] = (int(parts[0]), int(parts[1]), int(parts[2]))
    return parsed


def member_format(record: ReaderRecord, announced: Announcements) -> int:
    """The newest format the member of ``record`` announced under that record."""
    found = announced.get(record.reader_id)
    if found is None or found[:2] != (record.generation, record.joined_ms):
        return UNANNOUNCED_FORMAT
    return min(found[2], NEWEST_FORMAT)


def negotiated_format(readers: Mapping[str, ReaderRecord], announced: Announcements) -> int:
    """The format to write the group's log in with these members (see the module doc)."""
    if not readers:
        return UNANNOUNCED_FORMAT
    return min(member_format(record, announced) for record in readers.values())


def older_members(readers: Mapping[str, ReaderRecord], announced: Announcements) -> list[str]:
    """The members that do not read :data:`NEWEST_FORMAT` (older versions), sorted."""
    return sorted(
        reader_id
        for reader_id, record in readers.items()
        if member_format(record, announced) < NEWEST_FORMAT
    )
