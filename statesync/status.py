"""Status codes shared by every backend, and their mapping to exceptions (one place).

The Lua scripts (``statesync/scripts/*.lua``) return a table whose first element is one of
these codes; the in-memory backend uses the same codes, so both backends raise the same
exceptions from :func:`raise_for_status`.

The convention, for statesync and for the scripts of applications built on it (readergroup's
segment scripts, :mod:`readergroup.storage.segment_status`): every script returns a table whose
first element is a status code; ``0`` is OK; a code below :data:`FIRST_APPLICATION_CODE` means
the same wherever it appears (an application reuses ``NOT_FOUND``, ``TOO_LARGE`` and
``DUPLICATE`` for the same outcomes of its own); an application's own outcomes take codes from
:data:`FIRST_APPLICATION_CODE` up, so no code means one thing here and another there. Each
package maps its codes to its exceptions in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from statesync.errors import (
    BackendProtocolError,
    EntryTooLargeError,
    LogRegressedError,
    SynchronizerNotFoundError,
)

OK = 0
"""The operation happened."""
CONFLICT = 1
"""A conditional append found another revision; nothing was written. Not an error."""
NOT_FOUND = 2
"""The synchronizer has no metadata: never initialized, or deleted."""
TOO_LARGE = 3
"""The payload exceeded the size limit passed to the script; nothing was written."""
STALE = 4
"""A compaction (or a second wake-up) at or past the requested revision already exists;
nothing was written."""
AHEAD = 5
"""A compaction (or a second wake-up) asked for a revision past the head of the log; nothing
was written."""
DUPLICATE = 6
"""This writer's sequence number already landed; the reply names its revision."""
EXISTS = 7
"""``initialize`` found the synchronizer already created; nothing was written."""
REGRESSED = 8
"""The client's replica is not of this log: the reply is ``[8, head, kind]`` with kind
:data:`OTHER_INCARNATION` or :data:`OTHER_HISTORY`; nothing was written."""

FIRST_APPLICATION_CODE = 20
"""The first code an application's own scripts may use for outcomes of their own."""

OTHER_INCARNATION = 0
"""``REGRESSED`` kind: the synchronizer was deleted and created again since the replica loaded."""
OTHER_HISTORY = 1
"""``REGRESSED`` kind: the log lost entries the replica applied (a lossy failover or a restart
without persistence), and may have others in their place."""

_EXPECTED_BY_OPERATION: dict[str, frozenset[int]] = {
    "append": frozenset({OK, CONFLICT, DUPLICATE}),
    "read": frozenset({OK}),
    "compact": frozenset({OK, STALE}),
    "wake": frozenset({OK, STALE, AHEAD}),
    "initialize": frozenset({OK, EXISTS}),
}


def raise_for_status(operation: str, name: str, reply: Sequence[int]) -> int:
    """Return ``reply[0]`` if it is an expected outcome of ``operation``, else raise.

    ``reply`` is the script's reply table (integers only are inspected): the status code
    first, then the values the code documents.
    """
    code = int(reply[0])
    if code not in _EXPECTED_BY_OPERATION[operation]:
        _raise(operation, name, code, reply)
    return code


def _raise(operation: str, name: str, code: int, reply: Sequence[int]) -> NoReturn:
    if code == NOT_FOUND:
        raise SynchronizerNotFoundError(name)
    if code == TOO_LARGE:
        raise EntryTooLargeError(name, int(reply[1]), int(reply[2]))
    if code == REGRESSED:
        raise LogRegressedError(name, regressed_detail(operation, int(reply[1]), int(reply[2])))
    if code == AHEAD:
        raise BackendProtocolError(
            f"synchronizer {name!r}: compaction asked for a revision past the log head"
        )
    raise BackendProtocolError(
        f"synchronizer {name!r}: {operation} returned unexpected status code {code}"
    )


def regressed_detail(operation: str, head: int, kind: int) -> str:
    """Why a ``REGRESSED`` reply (or the same finding on a read) refused ``operation``."""
    if kind == OTHER_INCARNATION:
        cause = "the synchronizer was deleted and created again since this replica loaded it"
    else:
        cause = (
            "the log's history differs from this replica's (Redis lost acknowledged writes, "
            "for example in a failover to a replica that had not received them, and the log "
            f"went on without them; its head is revision {head})"
        )
    return f"{cause}; nothing was written by {operation}" if operation != "read" else cause
