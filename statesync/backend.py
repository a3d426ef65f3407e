"""The storage protocol a synchronizer runs on, and the records it exchanges.

A backend stores, per synchronizer name, an append-only log of opaque entries numbered by
revision (1, 2, 3, ...), the server time of each append, up to two snapshots, and the last
sequence number of each writer. Two backends implement it: :mod:`statesync.redis_backend`
(the product) and :mod:`statesync.memory_backend` (single-process tests and simulations);
the same test suite runs unchanged against both.

Contract every backend keeps:

* ``append`` is atomic. With ``expected_revision`` set it writes only if the head is exactly
  that revision, else it returns a conflict and writes nothing; except that an append naming
  the keys it concerns also lands after entries that concern only other keys.
* ``append`` refuses (:data:`~statesync.status.REGRESSED`, nothing written) a writer whose
  replica is of another incarnation, or whose history at its revision differs from the
  log's: every entry carries ``history = sha1hex(previous history + payload)``, revision 0
  carries the incarnation id, so equal histories mean equal logs up to that revision.
* ``append`` is idempotent per ``(writer, sequence)``: a sequence number at or below the
  writer's last landed one writes nothing and returns :data:`~statesync.status.DUPLICATE`
  with the revision of the last landed append (so a retry after a lost reply is safe).
* ``read`` is atomic per call: if entries after ``after_revision`` were truncated it
  returns the newest snapshot and the entries that follow it, never a gap.
* The server time stamped on entries comes from one clock (the server's), never the client's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

MAX_DISJOINT_WINDOW = 256
"""Most entries a keyed conditional append may land past (``append.lua`` has the same)."""


@dataclass(frozen=True, slots=True)
class RawEntry:
    """An entry as stored: its revision, server time (ms), undecoded payload and the log's
    history at it (``""`` for entries written before histories existed).

    ``refused_size`` > 0: the stored payload is that many bytes, over the read limit; it was
    left in the backend and ``payload`` is empty."""

    revision: int
    server_time_ms: int
    payload: bytes
    history: str = ""
    refused_size: int = 0


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What an append did.

    ``status`` is ``OK`` (written at ``revision``), ``CONFLICT`` (not written; the head is
    ``revision``) or ``DUPLICATE`` (not written; the writer's sequence already landed at
    ``revision``).
    """

    status: int
    revision: int
    server_time_ms: int = 0
    history: str = ""


@dataclass(frozen=True, slots=True)
class ReadResult:
    """One page of the log.

    ``snapshot`` is set when the reader was behind the truncation point: it holds the state
    as of ``snapshot_revision`` (whose history is ``snapshot_history``) and ``entries``
    continue from there. Otherwise ``anchor`` is the log's history at the revision the read
    started after, for the reader to compare with its own (``""``: not known).
    """

    head_revision: int
    incarnation: str
    snapshot_revision: int
    snapshot: bytes | None
    entries: list[RawEntry]
    anchor: str = ""
    snapshot_history: str = ""
    snapshot_refused_size: int = 0
    """> 0: the snapshot is that many bytes, over the read limit; ``snapshot`` is None."""


@dataclass(frozen=True, slots=True)
class CompactOutcome:
    """What a compaction did: ``compacted`` False means a newer snapshot already existed."""

    compacted: bool
    truncated_through: int
    removed_entries: int


class LogBackend(Protocol):
    """Storage for any number of synchronizer logs, addressed by name. Thread-safe."""

    def initialize(self, name: str, snapshot: bytes, incarnation: str) -> bool:
        """Create the log with ``snapshot`` at revision 0; ``False`` if it already existed."""
        ...

    def append(
        self,
        name: str,
        payload: bytes,
        *,
        expected_revision: int | None,
        writer: str,
        sequence: int,
        max_bytes: int,
        incarnation: str = "",
        anchor_revision: int = -1,
        anchor_history: str = "",
        wake: bool | Collection[str] = True,
        keys: Sequence[str] | None = None,
    ) -> AppendOutcome:
        """Append one entry (see the module contract). ``incarnation`` and the writer's
        history ``anchor_history`` at its revision ``anchor_revision`` are checked when given.
        ``wake``: the entry also signals the log's wake stream (``wait(..., wakes_only=True)``
        returns for it); a collection of follower names signals it only for them, on their
        own wake streams (``wait(..., wakes_only=True, follower=name)``; none at all if it is
        empty), decided on the writer's replica: when the entry lands past entries that
        replica had not applied, the writer names them again with :meth:`wake` once it has
        read them. (:func:`woken_followers` reads the names older writers put on the shared
        stream.) ``keys``: what the entry
        concerns (``None``: the whole state); a conditional append with keys lands past
        ``expected_revision`` too when every entry since (at most :data:`MAX_DISJOINT_WINDOW`,
        none truncated) has keys, none of them among these."""
        ...

    def wake(self, name: str, revision: int, followers: Collection[str] | None) -> bool:
        """Wake ``followers`` (``None``: every follower) again for the log as of ``revision``:
        a writer whose entry with named wake-ups landed past entries its replica had not
        applied names them on the state it read since (see ``append``). ``False`` if nothing
        was signalled: ``followers`` is empty, each of them (or, for ``None``, the shared
        stream) has a wake-up at or past this second one already (decided on a state as new
        or newer), or ``revision`` is past the head (the log lost entries)."""
        ...

    def read(
        self,
        name: str,
        after_revision: int,
        limit: int,
        *,
        max_entry_bytes: int | None = None,
        max_snapshot_bytes: int | None = None,
    ) -> ReadResult:
        """Return up to ``limit`` entries after ``after_revision`` (``-1``: from scratch).
        An entry or snapshot over its ``max_*_bytes`` is not transferred: it comes back
        empty with its size in ``refused_size`` / ``snapshot_refused_size``."""
        ...

    def wait(
        self,
        name: str,
        after_revision: int,
        timeout: float,
        *,
        wakes_only: bool = False,
        follower: str | None = None,
    ) -> bool:
        """Block until the log has an entry after ``after_revision`` (``wakes_only``: one
        whose wake-up is for every follower, or names ``follower``) or ``timeout`` passes."""
        ...

    def compact(
        self,
        name: str,
        revision: int,
        snapshot: bytes,
        *,
        incarnation: str = "",
        history: str = "",
    ) -> CompactOutcome:
        """Store ``snapshot`` at ``revision``; drop the snapshot before the previous one and
        the entries up to the previous snapshot's revision. Refused (``REGRESSED``) if the
        snapshot's ``incarnation`` or ``history`` (when given) are not the log's."""
        ...

    def delete(self, name: str) -> bool:
        """Remove the log, snapshots, writer table and wake streams (the followers' too);
        ``False`` if nothing existed."""
        ...

    def server_time_ms(self) -> int:
        """The backend's clock, in milliseconds since the epoch."""
        ...

    def close(self) -> None:
        """Release connections. Idempotent."""
        ...


WAKE_STREAM_LENGTH = 16
"""Wake-stream entries kept (``append.lua`` trims to the same): a read after a position that
returns fewer did not miss any (trimming drops the oldest, and only once there are this many)."""

WAKE_FOLLOWERS_FIELD = b"to"
"""Field of a wake-stream entry naming (newline-separated) the only followers it is for."""


def woken_followers(entry: Any) -> frozenset[str] | None:
    """The followers a wake-stream entry is for, as an ``XREAD`` of the wake stream returns it
    (``[id, fields]``, fields a flat list or a mapping): ``None`` for every follower (an entry
    without :data:`WAKE_FOLLOWERS_FIELD`)."""
    fields = entry[1] if len(entry) > 1 else ()
    if isinstance(fields, dict):
        named = fields.get(WAKE_FOLLOWERS_FIELD)
    else:
        named = None
        for i in range(0, len(fields) - 1, 2):
            if fields[i] == WAKE_FOLLOWERS_FIELD:
                named = fields[i + 1]
    if named is None:
        return None
    text = named.decode() if isinstance(named, bytes) else str(named)
    return frozenset(text.split("\n")) if text else frozenset()


def wakes_follower(entries: Sequence[Any], follower: str) -> bool:
    """Whether wake-stream ``entries`` (all an ``XREAD`` returned after the follower's
    position) concern ``follower``: one is for every follower or names it, or as many as the
    stream keeps came back (older ones, trimmed, may have named it)."""
    if len(entries) >= WAKE_STREAM_LENGTH:
        return True
    for entry in entries:
        named = woken_followers(entry)
        if named is None or follower in named:
            return True
    return False


def wake_revision(entry: Any) -> int:
    """The log revision a wake-stream entry (``[id, fields]``, id ``<revision>-0``, or
    ``<revision>-1`` for a writer's second wake-up) is for."""
    entry_id = entry[0]
    text = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return int(text.partition("-")[0])
