"""Status codes shared by every backend, and their mapping to exceptions (one place).

The Lua scripts (``statesync/scripts/*.lua``) return a table whose first element is one of
these codes; the in-memory backend uses the same codes, so both backends raise the same
exceptions from :func:`raise_for_status`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from statesync.errors import BackendProtocolError, EntryTooLargeError, SynchronizerNotFoundError

OK = 0
"""The operation happened."""
CONFLICT = 1
"""A conditional append found another revision; nothing was written. Not an error."""
NOT_FOUND = 2
"""The synchronizer has no metadata: never initialized, or deleted."""
TOO_LARGE = 3
"""The payload exceeded the size limit passed to the script; nothing was written."""
STALE = 4
"""A compaction at or past the requested revision already exists; nothing was written."""
AHEAD = 5
"""A compaction asked for a revision past the head of the log; nothing was written."""
DUPLICATE = 6
"""This writer's sequence number already landed; the reply names its revision."""
EXISTS = 7
"""``initialize`` found the synchronizer already created; nothing was written."""

_EXPECTED_BY_OPERATION: dict[str, frozenset[int]] = {
    "append": frozenset({OK, CONFLICT, DUPLICATE}),
    "read": frozenset({OK}),
    "compact": frozenset({OK, STALE}),
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
    if code == AHEAD:
        raise BackendProtocolError(
            f"synchronizer {name!r}: compaction asked for a revision past the log head"
        )
    raise BackendProtocolError(
        f"synchronizer {name!r}: {operation} returned unexpected status code {code}"
    )
