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
    TransactionClosedError,
    TransactionExpiredError,
    TransactionFencedError,
    TransactionNotFoundError,
    TransactionPositionsError,
)
from statesync.status import (
    CONFLICT,
    DUPLICATE,
    FIRST_APPLICATION_CODE,
    NOT_FOUND,
    OK,
    REGRESSED,
    TOO_LARGE,
)

__all__ = [
    "CONFLICT",
    "DUPLICATE",
    "ERRORS",
    "NOT_FOUND",
    "OK",
    "PAST_TAIL",
    "REGRESSED",
    "SEALED",
    "TOO_LARGE",
    "TXN_CLOSED",
    "TXN_EXPIRED",
    "TXN_FENCED",
    "TXN_POSITIONS",
    "TXN_UNKNOWN",
    "check",
]

SEALED = FIRST_APPLICATION_CODE
"""The segment is sealed; nothing was written (an append's reply names the tail)."""
PAST_TAIL = FIRST_APPLICATION_CODE + 1
"""A truncation asked for an offset past the segment's tail; nothing changed."""

TXN_FENCED = FIRST_APPLICATION_CODE + 2
"""The transaction's epoch is not its transactional id's current one, or the caller is not the
instance holding it: a newer instance fenced it; nothing was written."""
TXN_CLOSED = FIRST_APPLICATION_CODE + 3
"""The transaction is not open (the reply names its state); nothing was written."""
TXN_EXPIRED = FIRST_APPLICATION_CODE + 4
"""The transaction's lease ran out: the script aborted it; nothing was written."""
TXN_UNKNOWN = FIRST_APPLICATION_CODE + 5
"""No transaction of that id (never begun, or its finished record expired)."""
TXN_POSITIONS = FIRST_APPLICATION_CODE + 6
"""A consume-transform-produce decision found an input segment claimed by a later owner: the
transaction was aborted; nothing of it landed."""

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
    TXN_FENCED: (
        TransactionFencedError,
        lambda txn, reply: (
            f"{txn}: fenced by a newer writer instance of its transactional id (or one that "
            "resumed it); nothing of this call landed"
        ),
    ),
    TXN_CLOSED: (
        TransactionClosedError,
        lambda txn, reply: f"{txn} is {_state(reply)}, not open; nothing of this call landed",
    ),
    TXN_EXPIRED: (
        TransactionExpiredError,
        lambda txn, reply: f"{txn} outlived its lease and was aborted; nothing of it landed",
    ),
    TXN_UNKNOWN: (
        TransactionNotFoundError,
        lambda txn, reply: f"{txn} does not exist (never begun, or finished long ago)",
    ),
    TXN_POSITIONS: (
        TransactionPositionsError,
        lambda txn, reply: (
            f"{txn}: its reader lost input segment {_state(reply)} to another reader; the "
            "transaction was aborted and nothing of it landed"
        ),
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
    "txn_begin": frozenset({OK}),
    "txn_stage": frozenset({OK}),
    "txn_decide": frozenset({OK, CONFLICT}),
    "txn_replan": frozenset({OK, CONFLICT}),
    "txn_finish": frozenset({OK, DUPLICATE}),
    "txn_adopt": frozenset({OK}),
    "txn_claim": frozenset({OK}),
    "txn_merge": frozenset({OK, DUPLICATE}),
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


def _state(reply: Reply) -> str:
    """The state a TXN_CLOSED reply names."""
    state = reply[1] if len(reply) > 1 else b"?"
    return state.decode() if isinstance(state, bytes) else str(state)
