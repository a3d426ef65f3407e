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

from collections.abc import Iterable, Iterator, Mapping, Set
from typing import Any, Generic, TypeVar

import immutables

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class PMap(Mapping[K, V], Generic[K, V]):
    """An immutable mapping whose changes share structure with it (O(log n) each)."""

    __slots__ = ("_map",)

    _map: immutables.Map[K, V]

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        if isinstance(items, PMap):
            self._map = items._map
        else:
            self._map = immutables.Map(items)

    @classmethod
    def _wrap(cls, backing: immutables.Map[K, V]) -> PMap[K, V]:
        new: PMap[K, V] = object.__new__(cls)
        new._map = backing
        return new

    # -- reading (delegated to the C implementation) ----------------------------------------
    def __getitem__(self, key: K) -> V:
        return self._map[key]

    def get(self, key: K, default: Any = None) -> Any:
        return self._map.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __iter__(self) -> Iterator[K]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def items(self) -> Any:
        return self._map.items()

    def keys(self) -> Any:
        return self._map.keys()

    def values(self) -> Any:
        return self._map.values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PMap):
            return self._map == other._map
        if isinstance(other, Mapping):
            return len(self) == len(other) and all(
                key in other and other[key] == value for key, value in self._map.items()
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like a dict: equal to mutable mappings

    def __repr__(self) -> str:
        return f"PMap({dict(self._map.items())!r})"

    # -- changing (a new map; this one is untouched) ----------------------------------------
    def set(self, key: K, value: V) -> PMap[K, V]:
        return PMap._wrap(self._map.set(key, value))

    def delete(self, key: K) -> PMap[K, V]:
        """Without ``key`` (absent: the same map)."""
        if key not in self._map:
            return self
        return PMap._wrap(self._map.delete(key))

    def evolve(self, sets: Iterable[tuple[K, V]] = (), deletes: Iterable[K] = ()) -> PMap[K, V]:
        """With ``deletes`` removed (absent keys ignored), then ``sets`` set, in one pass."""
        mutation = self._map.mutate()
        for key in deletes:
            mutation.pop(key, None)
        for key, value in sets:
            mutation[key] = value
        return PMap._wrap(mutation.finish())


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
