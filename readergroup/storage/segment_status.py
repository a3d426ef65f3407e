"""Status codes of the segment scripts and their mapping to exceptions (one place). Pure.

The numbering follows the one convention of :mod:`statesync.status`: ``OK`` is 0, a code that
means the same in both packages is statesync's (``NOT_FOUND``, ``TOO_LARGE``, ``DUPLICATE``),
and readergroup's own outcomes take codes from :data:`statesync.status.FIRST_APPLICATION_CODE`
up, so no code means one thing in a statesync script and another in a segment script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn

from readergroup.core.errors import (
    EventTooLargeError,
    InvalidStreamCutError,
    ReaderGroupError,
    SegmentNotFoundError,
    StreamSealedError,
)
from statesync.status import (
    DUPLICATE,
    FIRST_APPLICATION_CODE,
    NOT_FOUND,
    OK,
    REGRESSED,
    TOO_LARGE,
)

__all__ = [
    "DUPLICATE",
    "ERRORS",
    "NOT_FOUND",
    "OK",
    "PAST_TAIL",
    "REGRESSED",
    "SEALED",
    "TOO_LARGE",
    "check",
]

SEALED = FIRST_APPLICATION_CODE
"""The segment is sealed; nothing was written (an append's reply names the tail)."""
PAST_TAIL = FIRST_APPLICATION_CODE + 1
"""A truncation asked for an offset past the segment's tail; nothing changed."""

Reply = Sequence[object]

ERRORS: dict[int, tuple[type[ReaderGroupError], Callable[[str, Reply], str]]] = {
    NOT_FOUND: (SegmentNotFoundError, lambda segment, reply: f"segment {segment} does not exist"),
    SEALED: (StreamSealedError, lambda segment, reply: f"segment {segment} is sealed"),
    TOO_LARGE: (
        EventTooLargeError,
        lambda segment, reply: (
            f"segment {segment}: event {reply[1]} of the batch is {reply[2]} bytes, over the "
            "stream's max_event_size; nothing was written"
        ),
    ),
    PAST_TAIL: (
        InvalidStreamCutError,
        lambda segment, reply: f"segment {segment}: offset is past the tail {reply[1]}",
    ),
}
"""Status code -> the exception it raises when the script's caller does not expect it, and
that exception's message from the segment's name and the reply. ``OK``, ``DUPLICATE`` and
``REGRESSED`` (an append found the segment's tail behind what its writer saw, statesync's
meaning of the code) are outcomes only: unexpected, they are a protocol error
(:class:`ReaderGroupError`)."""

_EXPECTED: dict[str, frozenset[int]] = {
    "append_events": frozenset({OK, SEALED, DUPLICATE, REGRESSED}),
    "seal_segment": frozenset({OK}),
    "truncate_segment": frozenset({OK}),
    "offset_at_time": frozenset({OK}),
    "heartbeat": frozenset({OK}),
    "commit_staged": frozenset({OK, SEALED, DUPLICATE}),
    "create_closed_segment": frozenset({OK}),
    "open_segment": frozenset({OK}),
}


def check(script: str, subject: str, reply: Reply) -> int:
    """Return the status code of ``reply`` if ``script`` expects it, else raise its error
    naming ``subject`` (the segment, or the key the script ran on)."""
    code: int = int(reply[0])  # type: ignore[call-overload]
    if code not in _EXPECTED[script]:
        _raise(script, subject, code, reply)
    return code


def _raise(script: str, subject: str, code: int, reply: Reply) -> NoReturn:
    if code not in ERRORS:
        raise ReaderGroupError(f"{script} on {subject} returned unexpected status {code}")
    error, message = ERRORS[code]
    raise error(message(subject, reply))
