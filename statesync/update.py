"""The :class:`Update` base class: one change to a replicated state.

An update is a small frozen dataclass registered with the synchronizer. Its
:meth:`Update.apply_to` is a *pure function* of the state: it returns the new state and
must not mutate its argument, read clocks, draw random numbers or do I/O. Every replica
applies the same updates in the same order and so reaches the same state.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from typing import Any, ClassVar, TypeAlias, TypeVar

R = TypeVar("R")


class Update(ABC):
    """One change to a replicated state, appended to the log and applied by every replica.

    Subclasses are frozen dataclasses whose fields are msgpack-able values or other
    registered dataclasses. ``apply_to`` may raise to reject an update: the writer then
    gets :class:`~statesync.errors.UpdateRejectedError` and nothing is appended.

    Example::

        @dataclass(frozen=True)
        class Add(Update):
            amount: int
            def apply_to(self, state: dict) -> dict:
                return {**state, "total": state["total"] + self.amount}
    """

    __slots__ = ()

    #: Name under which the type is written to the log. Defaults to the class name;
    #: set it to keep old logs readable after renaming the class.
    type_name: ClassVar[str | None] = None

    #: Fields a reader that does not know them may drop (the update then means the same, with
    #: less detail): written apart in format 3 (see :mod:`statesync.codec`), so a later
    #: version may add such a field without breaking readers of this one. Every other field
    #: is one a reader must know: an unknown one is refused.
    tagged_fields: ClassVar[frozenset[str]] = frozenset()

    #: Version of this type's meaning, written with it in format 3: raise it when an update's
    #: fields stay but what applying it does changes, so that older readers refuse it
    #: instead of applying it wrongly.
    wire_version: ClassVar[int] = 1

    #: Whether an entry holding this update signals the log's wake stream (see
    #: :class:`~statesync.names.KeyLayout`): followers that only act on some changes block
    #: there instead of on the log, so frequent updates nobody reacts to (progress records)
    #: set it ``False`` and wake nobody. An entry wakes if any of its updates does.
    wakes_followers: ClassVar[bool] = True

    def wakes(self, state: Any) -> Collection[str] | None:
        """The followers an entry holding this update must wake, decided on ``state``: the
        state right after the entry. ``None`` (the default) wakes every follower; a collection
        (possibly empty) names the only followers that have something to do in ``state`` (as
        they identify themselves to ``wait_for_updates(follower=...)``): the wake-up goes to
        their own wake streams, and no other follower is woken. An entry wakes the union of
        its waking updates' followers (every
        follower if any of them says ``None``). When it lands past entries its writer had not
        applied (``state`` is then not the log's), its writer, having read them, asks again
        on the state it read and wakes those named there too (a second wake-up of the same
        revision)."""
        return None

    def conflict_keys(self) -> tuple[str, ...] | None:
        """What this update concerns, for conditional appends: ``None`` (the default) is the
        whole state, so the append conflicts with every entry after the writer's revision;
        keys (strings without newlines) let it land past entries that concern only other
        keys, applied after them.

        Return keys only if, for every update whose keys are disjoint from these, applying
        that update first changes neither whether this one's ``apply_to`` (and the
        generator's preconditions) succeed nor what it does to the parts it touches. An entry
        concerns the union of its updates' keys (``None`` if any update returns ``None``)."""
        return None

    @abstractmethod
    def apply_to(self, state: Any) -> Any:
        """Return the state that results from applying this update to ``state``."""


Decision: TypeAlias = tuple[Sequence[Update], R]
"""What an ``update_state`` generator returns to give a result: ``(updates, result)``;
``update_state`` then returns ``result``, typed ``R``. A generator without a result returns the
updates alone (a list; ``update_state`` returns ``None``)."""
