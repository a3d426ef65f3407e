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

from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, Sequence
from itertools import groupby
from operator import attrgetter, itemgetter
from typing import Any, Generic, TypeVar

V = TypeVar("V")

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


def to_columns(
    table: StreamTable,
    mapping: Mapping[Key, V],
    value_columns: Callable[[list[V]], list[list[Any]]],
) -> list[list[Any]]:
    """``[stream indexes, ids, *value_columns(values)]`` of ``mapping``'s items. A map over a
    :class:`ColumnMap` (a decoded snapshot's, see ``PMap.over``) is copied column by column
    (no value built; ``value_columns`` must give the base's columns) and the items changed
    since are appended."""
    base = getattr(mapping, "base", None)
    if not isinstance(base, ColumnMap):
        keys, values = list(mapping.keys()), list(mapping.values())
        return [*table.key_columns(keys), *value_columns(values)]
    overlay, hidden = getattr(mapping, "changed")  # noqa: B009  # a PMap's, typed loosely here
    found = base.key_columns
    rows: Sequence[int] = base.rows
    if hidden:
        gone = {found.row(key) for key in hidden}
        rows = [row for row in rows if row not in gone]
    translation = table.indexes(found.streams)
    out = [
        list(map(translation.__getitem__, map(found.stream_indexes.__getitem__, rows))),
        list(map(found.ids.__getitem__, rows)),
        *(list(map(column.__getitem__, rows)) for column in base.columns),
    ]
    if overlay:
        more = [*table.key_columns(overlay.keys()), *value_columns(list(overlay.values()))]
        for existing, added in zip(out, more, strict=True):
            existing.extend(added)
    return out


def same(value: V) -> V:
    """``value`` itself (the value of a one-column :class:`ColumnMap`)."""
    return value


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


class KeyColumns:
    """Segment keys as columns (``[stream indexes, ids]`` over a stream table, checked), with
    a lookup by key built once: one ``{id: row}`` per stream, so no key tuple is made per
    segment until the keys are iterated. ``ValueError`` if the columns are malformed or list a
    key twice."""

    __slots__ = ("_rows", "ids", "stream_indexes", "streams")

    def __init__(self, streams: Sequence[str], columns: Any, what: str = "keys") -> None:
        stream_indexes, ids = fields(columns, what, 2)
        ints(stream_indexes, f"{what}: stream indexes")
        ints(ids, f"{what}: segment ids", len(stream_indexes))
        if stream_indexes and not 0 <= min(stream_indexes) <= max(stream_indexes) < len(streams):
            raise ValueError(f"{what} name a stream outside the table of {len(streams)}")
        self.streams, self.stream_indexes, self.ids = list(streams), stream_indexes, ids
        rows: dict[str, dict[int, int]] = {}
        used = set(stream_indexes)
        if len(used) == 1:  # one stream (the usual group): one dict built in C
            rows[streams[used.pop()]] = dict(zip(ids, range(len(ids)), strict=True))
        else:
            for row, (stream, segment) in enumerate(zip(stream_indexes, ids, strict=True)):
                rows.setdefault(streams[stream], {})[segment] = row
        if sum(map(len, rows.values())) != len(ids):
            raise ValueError(f"{what} list a segment twice")
        self._rows = rows

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, key: object) -> int | None:
        """The row of ``key``, or ``None``."""
        if type(key) is not tuple or len(key) != 2:
            return None
        found = self._rows.get(key[0])
        return None if found is None else found.get(key[1])

    def keys(self, rows: Iterable[int]) -> Iterator[Key]:
        """The keys of ``rows``, in their order."""
        rows = list(rows)
        names = map(self.streams.__getitem__, map(self.stream_indexes.__getitem__, rows))
        return zip(names, map(self.ids.__getitem__, rows), strict=True)


class ColumnMap(Mapping[Key, V], Generic[V]):
    """A read-only mapping of segment keys to values built from columns when read: the value
    of row ``r`` is ``make(*(column[r] for column in columns))``. Holds every row of ``keys``,
    or those of ``rows`` (a view: see :meth:`split`). Used as the base of a
    :class:`~readergroup.core.persistent.PMap` a snapshot decodes to, so decoding builds no
    object per segment."""

    __slots__ = ("_group", "columns", "key_columns", "make", "rows")

    def __init__(
        self,
        key_columns: KeyColumns,
        columns: Sequence[list[Any]],
        make: Callable[..., V],
        rows: Sequence[int] | None = None,
        group: tuple[list[int], int] | None = None,
    ) -> None:
        self.key_columns, self.columns, self.make = key_columns, tuple(columns), make
        self.rows: Sequence[int] = range(len(key_columns)) if rows is None else rows
        self._group = group

    def _row(self, key: object) -> int | None:
        row = self.key_columns.row(key)
        if row is not None and self._group is not None and self._group[0][row] != self._group[1]:
            return None
        return row

    def __getitem__(self, key: Key) -> V:
        row = self._row(key)
        if row is None:
            raise KeyError(key)
        return self.make(*(column[row] for column in self.columns))

    def __contains__(self, key: object) -> bool:
        return self._row(key) is not None

    def __iter__(self) -> Iterator[Key]:
        return self.key_columns.keys(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def values_of(self, rows: Sequence[int]) -> Iterator[V]:
        """The values of ``rows``, in their order."""
        return map(self.make, *(map(column.__getitem__, rows) for column in self.columns))

    def items(self) -> ItemsView[Key, V]:
        return _ColumnItems(self)

    def split(self, column: list[int]) -> dict[int, ColumnMap[V]]:
        """Views of this map's rows by their value in ``column`` (an owner, say). Rows already
        grouped by value (as snapshots write them) are split in one pass, into ranges."""
        make = self.make
        if isinstance(self.rows, range) and self.rows == range(len(column)):
            runs = [(value, len(list(rows))) for value, rows in groupby(column)]
            if len(runs) == len({value for value, _ in runs}):  # each value in one run
                views, start = {}, 0
                for value, length in runs:
                    rows = range(start, start + length)
                    views[value] = ColumnMap(
                        self.key_columns, self.columns, make, rows, (column, value)
                    )
                    start += length
                return views
        value_of = column.__getitem__
        ordered = sorted(self.rows, key=value_of)  # stable: rows stay in order within a value
        return {
            value: ColumnMap(self.key_columns, self.columns, make, list(rows), (column, value))
            for value, rows in groupby(ordered, key=value_of)
        }


class _ColumnItems(ItemsView[Key, V]):
    _mapping: ColumnMap[V]

    def __iter__(self) -> Iterator[tuple[Key, V]]:
        mapping = self._mapping
        return zip(mapping, mapping.values_of(mapping.rows), strict=True)
