"""Column form of segment-keyed data, for compact snapshots. Pure code.

A group state of S segments written one object at a time costs S msgpack extensions each way;
written as a few arrays of plain ints and strings (one per field, segment keys as a stream
index and an id) it is packed and unpacked by msgpack's C code in one call. Reading columns
back checks their shape and types, so a malformed snapshot is refused with a ``ValueError``
saying what is wrong (the codec turns it into a ``DecodeError`` naming the key and revision)
instead of building a state that fails later.

>>> table = StreamTable()
>>> columns = table.key_columns([("a/s", 1), ("b/s", 2), ("a/s", 3)])
>>> table.streams, columns
(['a/s', 'b/s'], [[0, 1, 0], [1, 2, 3]])
>>> keys_from_columns(table.streams, columns)
[('a/s', 1), ('b/s', 2), ('a/s', 3)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter, itemgetter
from typing import Any

#: A segment of a group: ``("scope/stream", segment id)`` (as in ``group_state``).
Key = tuple[str, int]


class StreamTable:
    """Stream names indexed as they are first met (segment keys then store the index)."""

    def __init__(self) -> None:
        self.streams: list[str] = []
        self._index: dict[str, int] = {}

    def index(self, stream: str) -> int:
        found = self._index.get(stream)
        if found is None:
            found = self._index[stream] = len(self.streams)
            self.streams.append(stream)
        return found

    def key_columns(self, keys: Iterable[Key]) -> list[list[int]]:
        """``[stream indexes, segment ids]`` of ``keys``, in their order."""
        keys = list(keys)
        names = list(map(_STREAM, keys))
        return [self.indexes(names), list(map(_ID, keys))]

    def indexes(self, names: list[str]) -> list[int]:
        """The index of each of ``names`` (new ones are added)."""
        for name in sorted(set(names) - self._index.keys()):
            self.index(name)
        return list(map(self._index.__getitem__, names))


_STREAM, _ID = itemgetter(0), itemgetter(1)


def attribute(objects: list[Any], name: str) -> list[Any]:
    """Attribute ``name`` of each of ``objects`` (one column)."""
    return list(map(attrgetter(name), objects))


def ints(value: Any, what: str, length: int | None = None) -> list[int]:
    """``value`` if it is a list of ints (of ``length`` if given), else ``ValueError``."""
    if type(value) is not list or not set(map(type, value)) <= {int}:
        raise ValueError(f"{what} is not a list of integers")
    if length is not None and len(value) != length:
        raise ValueError(f"{what} has {len(value)} values, expected {length}")
    return value


def strings(value: Any, what: str, length: int | None = None) -> list[str]:
    """``value`` if it is a list of strings (of ``length`` if given), else ``ValueError``."""
    if type(value) is not list or not set(map(type, value)) <= {str}:
        raise ValueError(f"{what} is not a list of strings")
    if length is not None and len(value) != length:
        raise ValueError(f"{what} has {len(value)} values, expected {length}")
    return value


def fields(value: Any, what: str, count: int) -> list[Any]:
    """``value`` if it is a list of ``count`` items, else ``ValueError``."""
    if type(value) is not list or len(value) != count:
        raise ValueError(f"{what} is not a list of {count} fields")
    return value


def keys_from_columns(streams: Sequence[str], columns: Any, what: str = "keys") -> list[Key]:
    """The keys of ``[stream indexes, segment ids]`` (checked) over the ``streams`` table."""
    stream_indexes, ids = fields(columns, what, 2)
    ints(stream_indexes, f"{what}: stream indexes")
    ints(ids, f"{what}: segment ids", len(stream_indexes))
    if stream_indexes and not 0 <= min(stream_indexes) <= max(stream_indexes) < len(streams):
        raise ValueError(f"{what} name a stream outside the table of {len(streams)}")
    return list(zip(map(streams.__getitem__, stream_indexes), ids, strict=True))


def sequence(value: Any, what: str) -> list[Any]:
    """``value`` if it is a list, else ``ValueError``."""
    if type(value) is not list:
        raise ValueError(f"{what} is not a list")
    return value
