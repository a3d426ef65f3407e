"""The values of the segment data plane: an event as stored (:class:`SegmentEvent`, a lazy view
over the raw Redis reply), a segment's counters (:class:`SegmentState`), an append batch and
its reply. Parsing only, no I/O; the key layout is in :mod:`readergroup.storage.keys`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from readergroup.core.errors import ReaderGroupError
from readergroup.core.headers import NO_HEADERS, decode_headers


class SegmentEvent:
    """One event as stored in a segment: a lazy view over the raw Redis reply.

    Attributes are decoded when read, so a reader that only needs payloads pays for nothing
    else. ``append_events.lua`` writes the fields in a fixed order (``k`` first when present,
    then ``h`` when present, then ``p w t b``); entries in any other shape are decoded by name.
    """

    __slots__ = ("_base", "_fields", "_id", "segment")

    def __init__(self, segment: int, entry_id: bytes, fields: Any) -> None:
        self.segment = segment
        self._id = entry_id
        if not is_canonical(fields):
            fields = canonical_fields(fields)
        self._base = len(fields) - 8
        self._fields = fields

    @property
    def offset(self) -> int:
        """Offset of the event in its segment (0 for the first event ever written)."""
        return id_offset(self._id)

    @property
    def epoch(self) -> int:
        """The segment's epoch when the event was appended (the entry id's sequence part,
        ``<offset + 1>-<epoch>``; see ``epoch.lua``): a new epoch begins whenever the server
        appending to the segment changed, so readers can tell a log that diverged in a
        failover from the one they read."""
        entry_id = self._id
        return int(entry_id[entry_id.index(b"-") + 1 :])

    @property
    def routing_key(self) -> str | None:
        if self._base == 0 or self._fields[0] != b"k":
            return None
        key: bytes = self._fields[1]
        return key.decode("utf-8", "surrogateescape")

    @property
    def raw_headers(self) -> bytes | None:
        """The stored ``h`` field (packed headers), ``None`` for an event without headers."""
        fields = self._fields
        if self._base == 4:
            raw: bytes = fields[3]
            return raw
        return fields[1] if self._base == 2 and fields[0] == b"h" else None

    @property
    def headers(self) -> Mapping[str, bytes]:
        """The event's headers (read-only; empty when it has none), decoded when read.
        Raises :class:`~readergroup.core.errors.SerializationError` naming the segment and
        offset if the stored field is not a map of str to bytes (not written by this
        library)."""
        raw = self.raw_headers
        if raw is None:
            return NO_HEADERS
        return decode_headers(raw, f"segment {self.segment} offset {self.offset}")

    @property
    def payload(self) -> bytes:
        payload: bytes = self._fields[self._base + 1]
        return payload

    @property
    def writer_ms(self) -> int:
        """The writer's clock when ``write_event`` was called (ms since the epoch)."""
        return _int(self._fields[self._base + 3])

    @property
    def server_ms(self) -> int:
        """The Redis server's clock when the event was appended (ms since the epoch)."""
        return _int(self._fields[self._base + 5])

    @property
    def byte_offset(self) -> int:
        """Payload bytes before this event in its segment (for lag in bytes)."""
        return _int(self._fields[self._base + 7])

    def as_tuple(self) -> tuple[int, int, str | None, bytes, int, int, int, bytes | None]:
        return (
            self.segment,
            self.offset,
            self.routing_key,
            self.payload,
            self.writer_ms,
            self.server_ms,
            self.byte_offset,
            self.raw_headers,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SegmentEvent) and self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash((self.segment, self._id))

    def __repr__(self) -> str:
        return (
            f"SegmentEvent(segment={self.segment}, offset={self.offset}, "
            f"routing_key={self.routing_key!r}, payload={self.payload[:32]!r}, "
            f"server_ms={self.server_ms})"
        )


@dataclass(frozen=True, slots=True)
class SegmentState:
    """A segment's data-plane counters: ``head`` and ``tail`` offsets, bytes, sealed flag."""

    segment: int
    exists: bool
    head: int
    tail: int
    bytes: int
    sealed: bool


META_FIELDS = ("created_ms", "sealed", "events", "bytes", "head")
"""The fields of a segment's meta hash, in the order :func:`segment_state_of` reads them."""


def segment_state_of(segment: int, fields: Sequence[Any]) -> SegmentState:
    """A segment's state from ``HMGET meta`` of :data:`META_FIELDS`."""
    created, sealed, events, size, head = fields
    return SegmentState(
        segment,
        created is not None,
        int(head or 0),
        int(events or 0),
        int(size or 0),
        sealed == b"1",
    )


@dataclass(frozen=True, slots=True)
class AppendBatch:
    """Events bound for one segment, sent as one idempotent ``append_events.lua`` call.

    ``event_args`` is the flattened ARGV tail: per event four values, the wire routing key
    (``""`` for none, else ``"k" + key``), the payload, the writer timestamp in ms and the
    packed headers (``b""`` for none; :mod:`readergroup.core.headers`).
    """

    scope: str
    stream: str
    segment: int
    writer: str
    sequence: int
    count: int
    event_args: list[Any]
    max_event_size: int
    seen_tail: int = 0
    """The highest tail the writer saw acknowledged in this segment (see ``append_events.lua``:
    a stored tail behind it was lost in a failover and is not reused)."""
    seen_created: str = ""
    """The segment's ``created_ms`` when the writer saw ``seen_tail`` (its incarnation)."""
    report_regression: bool = False
    """Refuse the batch (``REGRESSED``, the stored tail) instead of recording the offsets up
    to ``seen_tail`` as lost, so the writer may first :attr:`replay` its own there."""
    replay: Replay | None = None
    """Set on a batch appended again where a failover lost it (see :class:`Replay`)."""

    @classmethod
    def of(
        cls,
        scope: str,
        stream: str,
        segment: int,
        writer: str,
        sequence: int,
        events: Sequence[tuple[str | None, bytes, int] | tuple[str | None, bytes, int, bytes]],
        max_event_size: int,
    ) -> AppendBatch:
        """Build a batch from ``(routing key, payload, writer ms)`` tuples, each optionally
        with its packed headers fourth (:func:`~readergroup.core.headers.encode_headers`)."""
        args: list[Any] = []
        for key, payload, writer_ms, *headers in events:
            args += (wire_key(key), payload, writer_ms, headers[0] if headers else b"")
        return cls(scope, stream, segment, writer, sequence, len(events), args, max_event_size)

    def script_args(self, server: str = "") -> list[Any]:
        """``append_events.lua``'s ARGV; ``server``: the run_id of the server the call goes to,
        if the connection carrying it learnt it (``""``: the script asks INFO)."""
        args = [
            self.writer,
            self.sequence,
            self.max_event_size,
            self.count,
            *self.event_args,
            self.seen_tail,
            self.seen_created,
            server,
        ]
        replay = self.replay
        if replay is not None:
            args += ("replay", replay.first_offset, replay.epoch, replay.server_ms, replay.created)
        elif self.report_regression:
            args.append("report")
        return args


@dataclass(frozen=True, slots=True)
class Replay:
    """Where and how an acknowledged batch had landed, to append it again exactly so (same
    entry ids and fields) after a failover lost it: ``append_events.lua`` puts it back only
    at ``first_offset``, under ``epoch`` (the segment's current epoch) and in the same
    incarnation of the segment (``created``, its ``created_ms``)."""

    first_offset: int
    epoch: int
    server_ms: int
    created: str


def wire_key(routing_key: str | None) -> str:
    """How ``append_events.lua`` receives a routing key: ``""`` for none, else ``"k" + key``."""
    return "" if routing_key is None else "k" + routing_key


@dataclass(frozen=True, slots=True)
class AppendReply:
    """One batch's outcome. ``error`` is set when the batch was refused (its ``status`` is then
    :data:`REFUSED`): nothing of it was written, since every command of ``append_events.lua``
    that can fail (a key of the wrong type, a missing segment, an event too large) runs before
    its first write."""

    status: int
    first_offset: int = -1
    server_ms: int = 0
    tail: int = -1
    created: str = ""
    """The segment's ``created_ms`` (its incarnation), for :attr:`AppendBatch.seen_created`."""
    error: ReaderGroupError | None = None
    epoch: int = 0
    """The epoch the batch was appended under (``OK``), or the segment's (``REGRESSED``)."""


REFUSED = -1
""":attr:`AppendReply.status` of a batch refused with an error."""


LAST_EPOCH = 2**64 - 1
"""The largest sequence part of a stream entry id: ``f"{offset}-{LAST_EPOCH}"`` is at or after
the entry of offset ``offset - 1`` whatever its epoch (an inclusive range end)."""


def position_id(position: int, epoch: int) -> str:
    """The id to read after, for events from offset ``position`` on, when the entry at
    ``position - 1`` was read with ``epoch`` (0: not known). An entry at ``position - 1``
    with a newer epoch is returned too: the log diverged there (see ``epoch.lua``)."""
    return f"{position}-{epoch}"


def range_bounds(start: int, stop: int) -> tuple[str, str]:
    """``XRANGE`` bounds of the events ``[start, stop)`` (``stop=-1``: to the tail)."""
    return f"{start + 1}-0", "+" if stop < 0 else f"{stop}-{LAST_EPOCH}"


def parse_epochs(text: Any) -> list[tuple[int, int]]:
    """A segment's epochs, ``(epoch, first offset)`` oldest first, from its meta field
    ``epochs`` (``"<epoch>:<first offset>,"`` per epoch, written by ``epoch.lua``). Epoch 0
    (entries from before epochs existed) begins at offset 0."""
    if isinstance(text, bytes):
        text = text.decode()
    out = [(0, 0)]
    for part in str(text or "").split(","):
        epoch, _, start = part.partition(":")
        if epoch.isdigit() and start.isdigit():
            out.append((int(epoch), int(start)))
    return out


HISTORY_FIELDS = ("created_ms", "events", "epochs")
"""Meta fields read for a segment's log history: whether it exists, its tail, its epochs."""


def histories_of(
    segments: Sequence[int], replies: Sequence[Sequence[Any]]
) -> dict[int, tuple[int, list[tuple[int, int]]]]:
    """Each existing segment's ``(tail, epochs)`` from ``HMGET meta`` of
    :data:`HISTORY_FIELDS` per segment (a segment that does not exist is left out)."""
    return {
        segment: (int(tail or 0), parse_epochs(epochs))
        for segment, (created, tail, epochs) in zip(segments, replies, strict=True)
        if created is not None
    }


def parse_lost_ranges(recorded: Any) -> list[tuple[int, int]]:
    """Offset ranges ``[from, to)`` a segment lost in failovers, from its meta field ``lost``
    (``"<from>-<to>,"`` per range, recorded by ``append_events.lua``)."""
    text = recorded.decode() if isinstance(recorded, bytes) else str(recorded or "")
    ranges = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if low.isdigit() and high.isdigit():
            ranges.append((int(low), int(high)))
    return ranges


def lost_between(ranges: Sequence[tuple[int, int]], begin: int, end: int) -> bool:
    """Whether offsets ``[begin, end)`` are all within the lost ``ranges``."""
    covered = begin
    for low, high in sorted(ranges):
        if low <= covered < high:
            covered = high
    return covered >= end


def _int(value: bytes) -> int:
    """A stored integer field; ``-1`` when an entry not written by this library garbled it."""
    try:
        return int(value)
    except (ValueError, TypeError):
        return -1


def is_canonical(fields: Any) -> bool:
    """Whether an entry's fields are a list in the order ``append_events.lua`` writes them:
    ``k <key>`` (when the event has a routing key), ``h <headers>`` (when it has headers),
    then ``p w t b`` with their values. The payload is then ``fields[-7]``, the writer's ms
    ``fields[-5]``, the server's ms ``fields[-3]``, the byte offset ``fields[-1]``, the key
    ``fields[1]`` (when ``fields[0]`` is ``k``) and the headers the value after ``h``."""
    if type(fields) is not list:
        return False
    n = len(fields)
    if n == 10:
        return bool(fields[0] in _ONE_BEFORE_PAYLOAD and fields[8] == b"b")
    if n == 12:
        return bool(fields[0] == b"k" and fields[2] == b"h" and fields[10] == b"b")
    return bool(n == 8 and fields[0] == b"p" and fields[6] == b"b")


_ONE_BEFORE_PAYLOAD = (b"k", b"h")


def canonical_fields(fields: Any) -> list[Any]:
    """Fields of any other shape (parsed into a dict, another order, missing fields: entries
    not written by this library) in the order :func:`is_canonical` expects, decoded by name;
    a missing payload is empty and a missing number ``0``."""
    named = (
        dict(fields)
        if isinstance(fields, dict)
        else dict(zip(fields[::2], fields[1::2], strict=False))
    )
    ordered: list[Any] = [b"k", named[b"k"]] if b"k" in named else []
    if b"h" in named:
        ordered += (b"h", named[b"h"])
    for name in (b"p", b"w", b"t", b"b"):
        ordered += (name, named.get(name, b"" if name == b"p" else b"0"))
    return ordered


class StoredEvents(list[tuple[Any, ...]]):
    """What :func:`stored_events` returns: given it again, it is returned as it is (a read
    may flatten its reply as soon as it arrives, so the reply's lists die young)."""


def stored_events(entries: list[Any]) -> list[tuple[Any, ...]]:
    """Raw entries ``[id, fields]`` as flat tuples ``(id, routing key or None, payload, writer
    ms, server ms, byte offset, packed headers or None)``, the values still the bytes Redis
    returned (decoded on use); fields in another order than ``append_events.lua``'s are
    decoded by name (:func:`canonical_fields`).

    One object per event, holding only bytes: Python's garbage collector stops tracking such a
    tuple the first time it sees it, so events held in a reader's buffers cost later
    collections nothing (the reply's lists, tracked, are freed with the reply)."""
    if type(entries) is StoredEvents:
        return entries
    out = StoredEvents()
    append = out.append
    for entry_id, fields in entries:  # is_canonical() inlined: this runs once per event read
        if type(fields) is list:
            n = len(fields)
            if n == 10:
                k, key, _, payload, _, writer_ms, _, server_ms, b, byte_offset = fields
                if k == b"k" and b == b"b":
                    append((entry_id, key, payload, writer_ms, server_ms, byte_offset, None))
                    continue
                if k == b"h" and b == b"b":  # headers, no key
                    append((entry_id, None, payload, writer_ms, server_ms, byte_offset, key))
                    continue
            elif n == 8:
                p, payload, _, writer_ms, _, server_ms, b, byte_offset = fields
                if p == b"p" and b == b"b":
                    append((entry_id, None, payload, writer_ms, server_ms, byte_offset, None))
                    continue
            elif n == 12 and fields[0] == b"k" and fields[2] == b"h" and fields[10] == b"b":
                append((entry_id, fields[1], *fields[5::2], fields[3]))
                continue
        ordered = canonical_fields(fields)
        before_payload = ordered[: len(ordered) - 8]
        named = dict(zip(before_payload[::2], before_payload[1::2], strict=True))
        append((entry_id, named.get(b"k"), *ordered[-7::2], named.get(b"h")))
    return out


def id_offset(entry_id: bytes) -> int:
    """The offset of the event stored under entry id ``entry_id`` (``<offset + 1>-<seq>``)."""
    return int(entry_id[: entry_id.index(b"-")]) - 1


def id_epoch(entry_id: bytes) -> int:
    """The segment epoch an entry was appended under (``<offset + 1>-<epoch>``, ``epoch.lua``)."""
    return int(entry_id[entry_id.index(b"-") + 1 :])


def event_offset(event: tuple[Any, ...]) -> int:
    """The offset of an event of :func:`stored_events` (or of a raw entry ``[id, fields]``)."""
    return id_offset(event[0])


def writer_ms_of(event: tuple[Any, ...]) -> int:
    """The writer's ms of an event of :func:`stored_events`."""
    return _int(event[3])


def server_ms_of(event: tuple[Any, ...]) -> int:
    """The server's ms of an event of :func:`stored_events`."""
    return _int(event[4])


def raw_headers_of(event: tuple[Any, ...]) -> bytes | None:
    """The packed headers of an event of :func:`stored_events` (``None``: none)."""
    raw: bytes | None = event[6]
    return raw


def parse_event(segment: int, entry: Any) -> SegmentEvent:
    """A :class:`SegmentEvent` over one raw XRANGE/XREAD item ``[id, [field, value, ...]]``."""
    return SegmentEvent(segment, entry[0], entry[1])
