"""The local copy of a replicated state, and how log entries move it forward. Pure code.

Invariants:

* A :class:`Replica` is immutable; applying entries returns a new one.
* ``revision`` only grows by exactly one per applied entry; an entry for any other revision
  is rejected (a gap or a replay would make replicas diverge).
* Applying an entry is all-or-nothing: the updates of one entry are applied to a new value
  and the replica moves only if every one of them succeeded. ``apply_to`` must not mutate
  its argument, so a raising update cannot leave a half-updated state behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from statesync.codec import DecodedEntry
from statesync.errors import ApplyError, RevisionGapError
from statesync.update import Update

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Replica(Generic[S]):
    """A state as of ``revision`` of the log of one synchronizer ``incarnation``.

    ``server_time_ms`` is the backend's clock when the entry at ``revision`` was appended
    (for a snapshot: when the snapshotted entry was appended), so every replica judges
    time on the same clock. ``history`` is the log's chained history at ``revision``
    (``""`` when not known): replicas with the same history applied the same entries.
    """

    state: S
    revision: int
    incarnation: str
    server_time_ms: int
    history: str = ""


def apply_updates(state: S, updates: Iterable[Update], revision: int) -> S:
    """Apply ``updates`` in order and return the final state; the input is untouched.

    Raises :class:`ApplyError` (with the original as ``__cause__``) if one raises.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Add(Update):
    ...     n: int
    ...     def apply_to(self, state):
    ...         return state + self.n
    >>> apply_updates(1, [Add(2), Add(3)], revision=7)
    6
    """
    current: Any = state
    for update in updates:
        try:
            current = update.apply_to(current)
        except Exception as exc:
            raise ApplyError(revision, update) from exc
    result: S = current
    return result


def advance(replica: Replica[S], entries: Sequence[DecodedEntry]) -> Replica[S]:
    """Apply consecutive ``entries`` to ``replica``; all of them, or raise at the first bad one.

    Callers that want to keep the good prefix apply entries one at a time.
    """
    for entry in entries:
        if entry.revision != replica.revision + 1:
            raise RevisionGapError(
                f"entry revision {entry.revision} does not follow revision {replica.revision}"
            )
        replica = Replica(
            apply_updates(replica.state, entry.updates, entry.revision),
            entry.revision,
            replica.incarnation,
            entry.server_time_ms,
        )
    return replica


def split_generator_result(result: Any) -> tuple[list[Update], Any]:
    """Normalise what an ``update_state`` generator returned into ``(updates, result)``.

    A generator returns either a list (or tuple) of updates, or the pair
    ``(updates, result)`` where ``updates`` is a list or tuple. ``None`` means no updates.

    >>> split_generator_result(None)
    ([], None)
    >>> split_generator_result(([], "nothing to do"))
    ([], 'nothing to do')
    """
    if result is None:
        return [], None
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[0], (list, tuple))
        and not isinstance(result[1], Update)
    ):
        updates, value = result
        return _checked_updates(updates), value
    if isinstance(result, (list, tuple)):
        return _checked_updates(result), None
    raise TypeError(
        "an update_state generator must return a list of Update objects or a pair "
        f"(updates, result), not {type(result).__name__}"
    )


def _checked_updates(updates: Iterable[Any]) -> list[Update]:
    checked = list(updates)
    for update in checked:
        if not isinstance(update, Update):
            raise TypeError(f"{update!r} is not an Update")
    return checked
