"""Persistent (structure-sharing) maps and sets for the group state. Pure code.

A group state is immutable from the outside: the synchronizer hands states between threads and
keeps old ones as replicas. Copying its segment maps on every change cost O(S) per log entry;
these collections make a change cost O(log S) and share everything else with the state before.
They are backed by ``immutables.Map`` (a hash array mapped trie in C, the one behind
``contextvars``).

* :class:`PMap` is a read-only :class:`~collections.abc.Mapping`; it compares equal to any
  mapping with the same items (a ``dict`` included). Changes return a new map:
  :meth:`PMap.set`, :meth:`PMap.delete`, :meth:`PMap.evolve`.
* :class:`PSet` is a read-only :class:`~collections.abc.Set`, the same for sets (``frozenset``
  comparisons and operators work as for any ``Set``); :meth:`PSet.add`, :meth:`PSet.union`.

>>> m = PMap({"a": 1})
>>> m.set("b", 2) == {"a": 1, "b": 2}, m == {"a": 1}
(True, True)
>>> PSet([1]).add(2) == frozenset({1, 2})
True
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Set, ValuesView
from typing import Any, Generic, TypeVar

import immutables

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class PMap(Mapping[K, V], Generic[K, V]):
    """An immutable mapping whose changes share structure with it (O(log n) each).

    A map may also stand over a read-only *base* (:meth:`over`): a mapping whose values are
    built only when read, such as a snapshot's columns (:class:`~readergroup.core.columns.
    ColumnMap`), so a map of thousands of entries costs nothing per entry until used. Changes
    then go to the persistent overlay, and base keys changed or deleted are hidden (O(log n)
    each, as without a base)."""

    __slots__ = ("_base", "_hidden", "_map")

    _map: immutables.Map[K, V]
    _base: Mapping[K, V] | None
    _hidden: immutables.Map[K, None]
    """Keys of ``_base`` not seen through this map (deleted, or set in ``_map``)."""

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        if isinstance(items, PMap):
            self._map, self._base, self._hidden = items._map, items._base, items._hidden
        else:
            self._map, self._base, self._hidden = immutables.Map(items), None, _NO_KEYS

    @classmethod
    def _wrap(
        cls,
        backing: immutables.Map[K, V],
        base: Mapping[K, V] | None = None,
        hidden: immutables.Map[K, None] | None = None,
    ) -> PMap[K, V]:
        new: PMap[K, V] = object.__new__(cls)
        new._map, new._base, new._hidden = backing, base, _NO_KEYS if hidden is None else hidden
        return new

    @classmethod
    def over(cls, base: Mapping[K, V]) -> PMap[K, V]:
        """A map with ``base``'s items, read from it when asked for (``base`` must not change)."""
        return cls._wrap(immutables.Map(), base)

    # -- reading (delegated to the C implementation) ----------------------------------------
    def __getitem__(self, key: K) -> V:
        if self._base is None:
            return self._map[key]
        found = self._map.get(key, _MISSING)
        if found is not _MISSING:
            return found
        if key in self._hidden:
            raise KeyError(key)
        return self._base[key]

    def get(self, key: K, default: Any = None) -> Any:
        if self._base is None:
            return self._map.get(key, default)
        found = self._map.get(key, _MISSING)
        if found is not _MISSING:
            return found
        if key in self._hidden:
            return default
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        if key in self._map:
            return True
        return self._base is not None and key in self._base and key not in self._hidden

    def __iter__(self) -> Iterator[K]:
        if self._base is None:
            return iter(self._map)
        return self._based_keys()

    def _based_keys(self) -> Iterator[K]:
        yield from self._map
        hidden = self._hidden
        for key in self._base or ():
            if key not in hidden:
                yield key

    def __len__(self) -> int:
        if self._base is None:
            return len(self._map)
        return len(self._map) + len(self._base) - len(self._hidden)

    def items(self) -> Any:
        if self._base is None:
            return self._map.items()
        return _BasedItems(self)

    def keys(self) -> Any:
        if self._base is None:
            return self._map.keys()
        return KeysView(self)

    def values(self) -> Any:
        if self._base is None:
            return self._map.values()
        return _BasedValues(self)

    def _based_items(self) -> Iterator[tuple[K, V]]:
        yield from self._map.items()
        base, hidden = self._base, self._hidden
        if base is None:
            return
        if not hidden:
            yield from base.items()
            return
        for item in base.items():
            if item[0] not in hidden:
                yield item

    @property
    def base(self) -> Mapping[K, V] | None:
        """The read-only base this map stands over (``None``: none)."""
        return self._base

    @property
    def changed(self) -> tuple[Mapping[K, V], Set[K]]:
        """Over a base: the items set since (the overlay), and the base keys hidden (deleted
        or set since); without one, every item and no key."""
        return PMap._wrap(self._map), PSet._wrap(self._hidden)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PMap) and self._base is None and other._base is None:
            return self._map == other._map
        if isinstance(other, Mapping):
            return len(self) == len(other) and all(
                key in other and other[key] == value for key, value in self.items()
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like a dict: equal to mutable mappings

    def __repr__(self) -> str:
        return f"PMap({dict(self.items())!r})"

    # -- changing (a new map; this one is untouched) ----------------------------------------
    def set(self, key: K, value: V) -> PMap[K, V]:
        if self._base is None:
            return PMap._wrap(self._map.set(key, value))
        return self.evolve(((key, value),))

    def delete(self, key: K) -> PMap[K, V]:
        """Without ``key`` (absent: the same map)."""
        if key not in self:
            return self
        if self._base is None:
            return PMap._wrap(self._map.delete(key))
        return self.evolve(deletes=(key,))

    def evolve(self, sets: Iterable[tuple[K, V]] = (), deletes: Iterable[K] = ()) -> PMap[K, V]:
        """With ``deletes`` removed (absent keys ignored), then ``sets`` set, in one pass."""
        mutation = self._map.mutate()
        base = self._base
        if base is None:
            for key in deletes:
                mutation.pop(key, None)
            for key, value in sets:
                mutation[key] = value
            return PMap._wrap(mutation.finish())
        hidden = self._hidden.mutate()
        for key in deletes:
            mutation.pop(key, None)
            if key in base:
                hidden[key] = None
        for key, value in sets:
            mutation[key] = value
            if key in base:
                hidden[key] = None
        return PMap._wrap(mutation.finish(), base, hidden.finish())


_MISSING: Any = object()
_NO_KEYS: immutables.Map[Any, None] = immutables.Map()


class _BasedItems(ItemsView[K, V]):
    _mapping: PMap[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return self._mapping._based_items()


class _BasedValues(ValuesView[V]):
    _mapping: PMap[Any, V]

    def __iter__(self) -> Iterator[V]:
        return (value for _, value in self._mapping._based_items())


class PSet(Set[T], Generic[T]):
    """An immutable set whose changes share structure with it (O(log n) each)."""

    __slots__ = ("_map",)

    _map: immutables.Map[T, None]

    def __init__(self, members: Iterable[T] = ()) -> None:
        if isinstance(members, PSet):
            self._map = members._map
        else:
            self._map = immutables.Map((m, None) for m in members)

    @classmethod
    def _from_iterable(cls, members: Iterable[Any]) -> PSet[Any]:
        return PSet(members)

    @classmethod
    def _wrap(cls, backing: immutables.Map[T, None]) -> PSet[T]:
        new: PSet[T] = object.__new__(cls)
        new._map = backing
        return new

    def __contains__(self, member: object) -> bool:
        return member in self._map

    def __iter__(self) -> Iterator[T]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PSet):
            return self._map == other._map
        return Set.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PSet({set(self._map)!r})"

    def union(self, members: Iterable[T]) -> PSet[T]:
        """With ``members`` added (like ``frozenset.union`` of one iterable)."""
        mutation = self._map.mutate()
        for member in members:
            mutation[member] = None
        new: PSet[T] = object.__new__(PSet)
        new._map = mutation.finish()
        return new

    def add(self, member: T) -> PSet[T]:
        if member in self._map:
            return self
        new: PSet[T] = object.__new__(PSet)
        new._map = self._map.set(member, None)
        return new


def pmap(value: Mapping[K, V]) -> PMap[K, V]:
    """``value`` as a :class:`PMap` (itself when it is one already)."""
    return value if type(value) is PMap else PMap(value)


def pset(value: Iterable[T]) -> PSet[T]:
    """``value`` as a :class:`PSet` (itself when it is one already)."""
    return value if type(value) is PSet else PSet(value)
