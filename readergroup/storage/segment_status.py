"""Status codes of the segment scripts and their mapping to exceptions (one place). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from readergroup.core.errors import (
    EventTooLargeError,
    ReaderGroupError,
    SegmentNotFoundError,
    StreamSealedError,
    TruncatedDataError,
)

OK = 0
SEALED = 1
NOT_FOUND = 2
TOO_LARGE = 3
BELOW_HEAD = 4
PAST_TAIL = 5
DUPLICATE = 6

_EXPECTED: dict[str, frozenset[int]] = {
    "append_events": frozenset({OK, SEALED, DUPLICATE}),
    "seal_segment": frozenset({OK}),
    "truncate_segment": frozenset({OK}),
    "offset_at_time": frozenset({OK}),
    "heartbeat": frozenset({OK}),
    "commit_staged": frozenset({OK, SEALED, DUPLICATE}),
    "create_closed_segment": frozenset({OK}),
    "open_segment": frozenset({OK}),
}


def check(script: str, segment: str, reply: Sequence[object]) -> int:
    """Return the status code of ``reply`` if ``script`` expects it, else raise its error."""
    code: int = int(reply[0])  # type: ignore[call-overload]
    if code not in _EXPECTED[script]:
        _raise(script, segment, code, reply)
    return code


def _raise(script: str, segment: str, code: int, reply: Sequence[object]) -> NoReturn:
    if code == NOT_FOUND:
        raise SegmentNotFoundError(f"segment {segment} does not exist")
    if code == SEALED:
        raise StreamSealedError(f"segment {segment} is sealed")
    if code == TOO_LARGE:
        raise EventTooLargeError(
            f"segment {segment}: event {reply[1]} of the batch is {reply[2]} bytes, over the "
            "stream's max_event_size; nothing was written"
        )
    if code == BELOW_HEAD:
        raise TruncatedDataError(segment, -1, int(reply[1]))  # type: ignore[call-overload]
    if code == PAST_TAIL:
        raise ReaderGroupError(f"segment {segment}: offset is past the tail {reply[1]}")
    raise ReaderGroupError(f"segment {segment}: {script} returned unknown status {code}")
