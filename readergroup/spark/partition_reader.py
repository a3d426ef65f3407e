"""Executor side of the ``readergroup`` data source: one partition's events as Arrow batches.

**Why a plain XRANGE needs no transaction.** A partition is a range ``[start, end)`` of one
segment that the driver planned below a tail it had read, so every offset in it had been
written when the plan was made. A segment's events never change once written: stream ids are
explicit (``<offset + 1>-0``), appends only add ids above the tail, and the only removal is
truncation, which deletes from the head up (``XTRIM MINID``). So a reply to ``XRANGE`` whose
first id is the chunk's first offset and whose ids are exactly the offsets that follow proves
by itself that those events exist and that none of them is missing: no ``MULTI``, no metadata
read beside it. Only a reply that proves nothing (empty, starting past the chunk's start, ids
not of the library's form) is read again with ``SegmentStore.read_range``, whose ``MULTI`` makes the
metadata and the events agree, to tell truncation, a missing segment and foreign entries
apart. Truncation racing the read cannot slip through: it removes the chunk's first event
before any later one, and a reply without it takes the careful path.

**Columns built directly.** Events are not turned into per-event objects: the columns are
taken from the raw reply (the fields' fixed order written by ``append_events.lua``) and
converted by Arrow in bulk (UTF-8 validation, integer parsing). Entries of any other shape
(foreign entries) go through
:class:`~readergroup.storage.segment_records.SegmentEvent`, which decodes any shape.
"""

from __future__ import annotations

import array
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa

from readergroup.core.errors import (
    CorruptSegmentError,
    DataLostError,
    ReaderGroupError,
    SegmentNotFoundError,
    TruncatedDataError,
)
from readergroup.core.headers import decode_headers
from readergroup.core.routing import segment_name
from readergroup.storage.connection import RedisConnection
from readergroup.storage.segment_records import SegmentEvent, is_canonical

CHUNK_EVENTS = 1000
"""Events per ``XRANGE`` and per Arrow record batch."""

TIMESTAMP = pa.timestamp("us", tz="UTC")
"""Arrow type of the ``timestamp`` column (Spark's TimestampType)."""

# the fields SegmentEvent recognises its fast layouts by (the first and the last name)
_KEYED = ((0, b"k"), (8, b"b"))
_PLAIN = ((0, b"p"), (6, b"b"))
_INT64_MS = 2**63 // 1000  # writer ms beyond this do not fit a microsecond timestamp


@dataclass(frozen=True, slots=True)
class Columns:
    """One chunk of a segment, column by column: offsets, raw routing keys (``None``: no
    key), raw payloads, the writers' timestamps (:data:`TIMESTAMP`) and the raw (packed)
    headers (``None``: none)."""

    segment: int
    offsets: pa.Array
    keys: list[bytes | None]
    payloads: list[bytes]
    timestamps: pa.Array
    headers: list[bytes | None]


def read_partition_columns(
    connection: RedisConnection,
    scope: str,
    stream: str,
    segment: int,
    start: int,
    end: int,
    *,
    skip_lost: bool,
) -> Iterator[Columns]:
    """The events ``[start, end)`` of ``segment`` in chunks of :data:`CHUNK_EVENTS`.

    Data lost to truncation raises :class:`TruncatedDataError` (a missing segment
    :class:`SegmentNotFoundError`), unless ``skip_lost``: then the lost part is skipped.
    Offsets lost in a failover (recorded by ``append_events.lua``) raise
    :class:`DataLostError` after the events before them, or are skipped with ``skip_lost``;
    other entries out of sequence (not written by this library) raise
    :class:`CorruptSegmentError` after the events before them."""
    events_key = connection.keys.segment(scope, stream, segment).events
    while start < end:
        want = min(CHUNK_EVENTS, end - start)
        entries = connection.segments.read_raw(scope, stream, segment, start, end, want)
        columns = _contiguous_columns(segment, start, entries)
        if columns is not None:
            yield columns
            start += len(entries)
            continue
        try:  # the careful path: metadata and events read together
            _, events = connection.segments.read_range(scope, stream, segment, start, end, want)
        except TruncatedDataError as exc:
            if not skip_lost:
                raise
            start = max(start, exc.head)  # skip what retention deleted
            continue
        except SegmentNotFoundError:
            if not skip_lost:
                raise
            return  # the whole segment was truncated away
        if not events:
            return
        run = _consecutive(events, start)
        if run:
            yield _event_columns(segment, events[:run])
        if run < len(events):
            after = events[run - 1].offset if run else start - 1
            resume = events[run].offset
            name = segment_name(scope, stream, segment)
            if connection.segments.lost_in_failover(scope, stream, segment, after + 1, resume):
                if not skip_lost:
                    raise DataLostError(
                        f"segment {name}: offsets {after + 1}..{resume - 1} were lost in a "
                        "failover (acknowledged, then a replica without them took over); "
                        "fail_on_data_loss=false skips them"
                    )
                start = resume
                continue
            raise CorruptSegmentError(
                segment_name(scope, stream, segment),
                events_key,
                f"the entry after offset {after} has offset {events[run].offset} (entries out "
                "of sequence, not written by this library)",
            )
        start = events[-1].offset + 1


def _consecutive(events: Sequence[SegmentEvent], start: int) -> int:
    """How many of ``events`` are at offsets ``start, start + 1, ...``."""
    run = 0
    while run < len(events) and events[run].offset == start + run:
        run += 1
    return run


def _contiguous_columns(segment: int, start: int, entries: Any) -> Columns | None:
    """The columns of ``entries`` if they are exactly the offsets ``start, start + 1, ...`` in
    the library's own field layout (with or without a routing key); else ``None``."""
    count = len(entries)
    if not count or not isinstance(entries, list):
        return None
    ids = [entry[0] for entry in entries]
    first, last = ids[0], ids[-1]
    dash = first.find(b"-")
    if first[:dash] != b"%d" % (start + 1) or not last.startswith(b"%d-" % (start + count)):
        return None
    # ids are strictly increasing: the first and last in place and every one of the first's
    # epoch (sequence part: "<offset + 1>-<epoch>"), so no offset repeats and none is missing
    # (a chunk across epochs takes the careful path)
    if (b"\n".join(ids) + b"\n").count(first[dash:] + b"\n") != count:
        return None
    fields = [entry[1] for entry in entries]
    widths = set(map(len, fields))
    headers: list[bytes | None] = [None] * count
    if widths == {10} and _named(fields, _KEYED):
        keys: list[bytes | None] = list(map(itemgetter(1), fields))
        payloads = list(map(itemgetter(3), fields))
        writer_ms = list(map(itemgetter(5), fields))
    elif widths == {8} and _named(fields, _PLAIN):
        keys = [None] * count
        payloads = list(map(itemgetter(1), fields))
        writer_ms = list(map(itemgetter(3), fields))
    elif all(map(is_canonical, fields)):  # mixed: keyed or not, with headers or not
        keys = [f[1] if f[0] == b"k" else None for f in fields]
        payloads = [f[-7] for f in fields]
        writer_ms = [f[-5] for f in fields]
        headers = [_stored_headers(f) for f in fields]
    else:
        return None
    offsets = array.array("q", range(start, start + count))
    return Columns(
        segment,
        pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(offsets)]),
        keys,
        payloads,
        _timestamps(writer_ms),
        headers,
    )


def _named(fields: list[Any], names: tuple[tuple[int, bytes], ...]) -> bool:
    """Whether every entry has each of ``names`` (field position, field name)."""
    count = len(fields)
    return all(list(map(itemgetter(i), fields)).count(name) == count for i, name in names)


def _stored_headers(fields: list[Any]) -> bytes | None:
    """The packed headers of an entry in ``append_events.lua``'s layout (``None``: none)."""
    if len(fields) == 12:
        raw: bytes = fields[3]
        return raw
    return fields[1] if fields[0] == b"h" else None


def _event_columns(segment: int, events: Sequence[SegmentEvent]) -> Columns:
    """Columns of events decoded one by one (any entry shape)."""
    keys = [
        None if e.routing_key is None else e.routing_key.encode("utf-8", "surrogateescape")
        for e in events
    ]
    return Columns(
        segment,
        pa.array([e.offset for e in events], type=pa.int64()),
        keys,
        [e.payload for e in events],
        _ms_timestamps([e.writer_ms for e in events]),
        [e.raw_headers for e in events],
    )


def _timestamps(values: list[bytes]) -> pa.Array:
    """Stored writer ms as timestamps, parsed by Arrow in bulk; a garbled value (a foreign
    entry) is -1 ms."""
    try:
        parsed = pa.array(values, type=pa.binary()).cast(pa.string()).cast(pa.int64())
        # safe casts: a value that does not fit microseconds raises
        return parsed.cast(pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _ms_timestamps([_stored_int(v) for v in values])


def _ms_timestamps(values: list[int]) -> pa.Array:
    bounded = [v * 1000 if -_INT64_MS < v < _INT64_MS else -1000 for v in values]
    return pa.array(bounded, type=pa.int64()).cast(TIMESTAMP)


def _stored_int(value: bytes) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


def _texts(values: Sequence[bytes | None]) -> pa.Array:
    """UTF-8 text validated by Arrow in bulk; invalid bytes (foreign data) become U+FFFD."""
    raw = pa.array(values, type=pa.binary())
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if v is None else v.decode("utf-8", "replace") for v in values],
            type=pa.string(),
        )


def to_record_batch(
    columns: Columns, schema: pa.Schema, serializer: str, include_headers: bool = False
) -> pa.RecordBatch:
    """``columns`` as one Arrow batch of ``schema`` (Spark's own Arrow form of the read
    schema). With ``include_headers``, the field ``headers`` holds each event's headers (an
    empty map when none). With ``serializer="json"``, fields of ``schema`` other than the
    base columns are taken by name from each event's JSON object (a non-object value is
    field ``value``)."""
    decoded = _json_objects(columns) if serializer == "json" else None
    count = len(columns.payloads)
    arrays: list[pa.Array] = []
    for field in schema:
        name = field.name
        if name == "routing_key":
            array = _texts(columns.keys)
        elif name == "event" and serializer == "utf8":
            array = _texts(columns.payloads)
        elif name == "event":
            array = pa.array(columns.payloads, type=pa.binary())
        elif name == "segment_id":
            array = pa.repeat(pa.scalar(columns.segment, pa.int64()), count)
        elif name == "offset":
            array = columns.offsets
        elif name == "timestamp":
            array = columns.timestamps
        elif name == "headers" and include_headers:
            array = _headers(columns, field.type)
        elif decoded is not None:
            array = pa.array([d.get(name) for d in decoded], type=field.type)
        else:
            array = pa.nulls(count, type=field.type)
        arrays.append(array if array.type == field.type else array.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _headers(columns: Columns, kind: pa.DataType) -> pa.Array:
    """The ``headers`` column: each event's headers decoded (an empty map when none); a field
    not written by this library raises a SerializationError naming segment and offset."""
    maps: list[list[tuple[str, bytes]]] = []
    for index, raw in enumerate(columns.headers):
        if raw is None:
            maps.append([])
            continue
        where = f"segment {columns.segment} offset {columns.offsets[index].as_py()}"
        maps.append(list(decode_headers(raw, where).items()))
    return pa.array(maps, type=kind)


def _json_objects(columns: Columns) -> list[dict[str, Any]]:
    decoded: list[dict[str, Any]] = []
    for index, payload in enumerate(columns.payloads):
        try:
            value = json.loads(payload)
        except ValueError as exc:
            offset = columns.offsets[index].as_py()
            raise ReaderGroupError(
                f"segment {columns.segment} offset {offset}: event is not JSON: {exc}"
            ) from exc
        decoded.append(value if isinstance(value, dict) else {"value": value})
    return decoded
