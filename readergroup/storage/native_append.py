"""Appends as native Redis commands: explicit-id ``XADD``s in one ``MULTI``/``EXEC``, guarded
by ``WATCH``, instead of one ``redis.call`` per event inside ``append_events.lua``.

Why: inside a script every ``XADD`` pays the script engine's per-call cost (argument
conversion, command lookup, reply conversion) on top of the command itself, about three times
the Redis CPU of a plain ``XADD``. Redis is single-threaded per shard, so that cost is every
deployment's ceiling. Here the per-event work is plain ``XADD``s; only per-batch checks remain.

One round (every batch of a writer's pipelined round) is two round trips on one connection:

1. ``WATCH`` every key of every batch (meta, events, writers), then read what
   ``append_events.lua`` reads: the meta counters and sealed flag, the writer's last batch
   sequence, the last append's server time (meta field ``t``), the segment's epoch and the
   server that began it (``ep``, ``srv``), the events key's type, ``TIME`` and, once per
   connection, the server's ``run_id`` (``INFO server``; see
   :mod:`readergroup.storage.raw_connection`).
2. ``MULTI``, per batch the ``XADD``s at the explicit ids ``<offset + 1>-<epoch>`` from the
   tail read in step 1 and the counters, ``EXEC`` (and the acknowledgement ``WAIT``, if any).

Why this is as safe as the script:

* **Atomic and in order.** ``EXEC`` runs the queued commands with nothing between them, and
  ``WATCH`` aborts it if any watched key changed after step 1 (another writer's append, a seal,
  a truncation, a rogue write): the offsets computed from the tail are still free, the seal and
  duplicate checks still hold. Explicit ids would also refuse a reused offset on their own.
* **Nothing partial.** A command refused when queued (``OOM``, ``READONLY``, an ACL denial)
  makes ``EXEC`` discard the whole transaction (``EXECABORT``). Commands cannot fail when run:
  the keys' types were checked under ``WATCH`` and the ids are above the top entry.
* **Idempotent.** The writer's last sequence is read under ``WATCH``; a batch that landed
  already, like anything else unusual (a sealed or missing segment, an event over the limit, a
  key of the wrong type, an aborted ``EXEC``), sends the round through ``append_events.lua``,
  whose replies define the outcome. So does a round of fewer than :data:`MIN_EVENTS` events,
  where one round trip matters more than Redis CPU.
* **Same epochs** (``epoch.lua``): the entries carry the segment's epoch; a segment last
  appended to by another server (a failover, a restart) begins a new one in the transaction,
  numbered and recorded as the script does.
* **Server times never decrease along a segment** (``offset_at_time`` relies on it): each
  batch is stamped ``max(TIME, meta t)``, as ``append_events.lua`` does.
"""

from __future__ import annotations

import functools
from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

import redis

from readergroup.core.errors import NativeAppendConflictError
from readergroup.core.steps import StepDriver
from readergroup.storage.keys import KeyLayout
from readergroup.storage.raw_connection import known_server as _known_server
from readergroup.storage.raw_connection import pack as _pack
from readergroup.storage.raw_connection import pooled_connection
from readergroup.storage.raw_connection import read as _read
from readergroup.storage.raw_connection import remember_server as _remember_server
from readergroup.storage.raw_connection import round_trip as _round_trip
from readergroup.storage.raw_connection import run_id as _run_id
from readergroup.storage.raw_connection import text as _text
from readergroup.storage.segment_records import AppendBatch

_STREAM = (b"stream", b"none", "stream", "none")  # TYPE replies of an events key to append to
_HIREDIS_PARSER: Any = None  # redis-py's hiredis parser, whose reader _skip reads directly
ASYNC_HIREDIS_PARSER: Any = None  # redis.asyncio's (storage/aio_append.py reads it so)
NOT_ENOUGH_DATA: Any = object()  # what their reader returns while a reply is incomplete
try:
    from redis._parsers import hiredis as _hiredis_parsing

    _HIREDIS_PARSER = _hiredis_parsing._HiredisParser
    ASYNC_HIREDIS_PARSER = _hiredis_parsing._AsyncHiredisParser
    NOT_ENOUGH_DATA = _hiredis_parsing.NOT_ENOUGH_DATA
except (ImportError, AttributeError):  # another redis-py layout: read through read_response
    pass

MIN_EVENTS = 64
"""Smallest round sent natively; smaller rounds take one round trip through the script."""

MAX_BATCHES = 256
"""Most batches (segments) of a round sent natively; a round over more segments takes the
script. Redis's ``WATCH`` looks through the keys a connection already watches for each key it
adds, so watching K keys costs O(K^2) on the server: three keys per segment of a round over
10,000 segments blocked Redis for over 10 s (the script's pipeline is linear)."""


def append_natively(
    client: redis.Redis,
    layout: KeyLayout,
    batches: Sequence[AppendBatch],
    wait: Sequence[Any] | None,
) -> tuple[list[tuple[int, int, bytes, int]], Any] | None:
    """Append ``batches`` natively; return each batch's first offset, server ms, the
    segment's ``created_ms`` and the epoch it went under, and the reply of ``wait`` (``None``
    without one); or ``None`` when the round must go through the script (nothing of it was
    written then: a replay always does). Connection errors propagate (redis-py's)."""
    if not goes_natively(batches):
        return None
    with pooled_connection(client) as connection:
        steps = native_steps(layout, batches, wait, _known_server(connection))
        driver = StepDriver(steps)
        try:
            while (step := driver.next()) is not None:
                if type(step) is Remember:
                    _remember_server(connection, step.server)
                elif type(step) is RoundTrip:
                    driver.reply = _round_trip(connection, step.commands)
                else:
                    assert type(step) is Transaction
                    connection.send_packed_command(step.parts, check_health=False)
                    _skip(connection, step.queued)
                    driver.reply = [_read(connection) for _ in range(step.replies)]
        except NativeAppendConflictError:  # nothing written; the connection is in a clean state
            return None
        return driver.result  # type: ignore[no-any-return]


def goes_natively(batches: Sequence[AppendBatch]) -> bool:
    """Whether a round may be appended natively (enough events, not too many segments, no
    replay), else through the script."""
    return not (
        sum(batch.count for batch in batches) < MIN_EVENTS
        or len(batches) > MAX_BATCHES
        or any(batch.replay is not None for batch in batches)
    )


class RoundTrip(NamedTuple):
    """Send ``commands`` at once, send back their replies (error replies as values)."""

    commands: list[tuple[Any, ...]]


class Transaction(NamedTuple):
    """Send the packed ``parts``, read and drop ``queued`` replies (the ``QUEUED`` ones), then
    send back the next ``replies`` replies (``EXEC``'s, and the wait's)."""

    parts: list[bytes]
    queued: int
    replies: int


class Remember(NamedTuple):
    """The connection's socket reaches the server whose ``run_id`` is ``server``."""

    server: str | None


NativeSteps = Generator[
    RoundTrip | Transaction | Remember, Any, tuple[list[tuple[int, int, bytes, int]], Any]
]


def native_steps(
    layout: KeyLayout,
    batches: Sequence[AppendBatch],
    wait: Sequence[Any] | None,
    server: str | None,
) -> NativeSteps:
    """The round trips of a native append (the threaded and the asyncio appends drive them,
    see :class:`~readergroup.core.steps.StepDriver`); ``server``: the ``run_id`` the
    connection knows (``None``: not known, ``INFO`` is asked). Raises
    :class:`NativeAppendConflictError` when the round must take the script (nothing written,
    the connection left clean)."""
    keys = [layout.segment(b.scope, b.stream, b.segment) for b in batches]
    replies, now_ms, server = yield from _first_round(batches, keys, server)
    commands = [b"*1\r\n$5\r\nMULTI\r\n"]
    outcomes: list[tuple[int, int, bytes, int]] = []  # (first offset, server ms, created, epoch)
    # meta key -> tail, bytes, ms, epoch of this round
    tails: dict[str, tuple[int, int, int, int]] = {}
    for index, (batch, (meta, events, writers)) in enumerate(zip(batches, keys, strict=True)):
        state, last, kind = replies[3 * index : 3 + 3 * index]
        if any(isinstance(reply, Exception) for reply in (state, last)) or kind not in _STREAM:
            raise (yield from _unwatched())  # a key of the wrong type: the script names it
        created, sealed, tail_text, bytes_text, last_ms, epoch_text, began, history = state
        if (
            created is None
            or sealed in (b"1", "1")
            or (last is not None and int(last) >= batch.sequence)
            or server is None
        ):
            raise (yield from _unwatched())
        if meta in tails:
            tail, size, ms, epoch = tails[meta]
        else:
            tail, size = int(tail_text or 0), int(bytes_text or 0)
            if tail < batch.seen_tail:  # appends were lost: the script records it
                raise (yield from _unwatched())
            ms = max(now_ms, int(last_ms or 0))
            epoch, begin = _epoch(meta, epoch_text, began, history, server, tail, now_ms)
            if begin is not None:
                commands.append(begin)
        command, size_after = _xadds(events, tail, size, ms, epoch, batch)
        if command is None:  # an event over the limit: the script names it
            raise (yield from _unwatched())
        commands.append(command)
        count = batch.count
        commands.append(
            _pack(
                (
                    b"HSET",
                    meta,
                    b"events",
                    b"%d" % (tail + count),
                    b"bytes",
                    b"%d" % size_after,
                    b"t",
                    b"%d" % ms,
                )
            )
        )
        commands.append(_pack((b"HSET", writers, batch.writer, b"%d" % batch.sequence)))
        outcomes.append((tail, ms, created, epoch))
        tails[meta] = (tail + count, size_after, ms, epoch)
    # MULTI, each new epoch's HSET, per batch its XADDs (one packed part) and two HSETs
    queued = len(commands) + sum(batch.count - 1 for batch in batches)
    commands.append(b"*1\r\n$4\r\nEXEC\r\n")
    if wait is not None:
        commands.append(_pack(tuple(wait)))
    read = yield Transaction(commands, queued, 1 if wait is None else 2)
    executed = read[0]
    acknowledged = read[1] if wait is not None else None
    if executed is None or isinstance(executed, Exception):  # a watched key changed, EXECABORT
        raise NativeAppendConflictError
    if any(issubclass(kind, Exception) for kind in set(map(type, executed))):  # cannot happen
        raise redis.ResponseError(f"a native append failed part way: {executed!r}")
    return outcomes, acknowledged


def _epoch(
    meta: str, epoch: Any, began: Any, history: Any, server: str, tail: int, now_ms: int
) -> tuple[int, bytes | None]:
    """The epoch to append under, and the ``HSET`` that begins it when another server
    appended last (a failover, a restart), numbered and recorded as ``epoch.lua`` does."""
    current = int(epoch or 0)
    if _text(began) == server:
        return current, None
    new = max(current + 1, now_ms)
    began_at = f"{_text(history)}{new}:{tail},"
    return new, _pack((b"HSET", meta, b"ep", new, b"srv", server, b"epochs", began_at))


def _first_round(
    batches: Sequence[AppendBatch], keys: Sequence[tuple[str, str, str]], server: str | None
) -> Generator[RoundTrip | Remember, Any, tuple[list[Any], int, str | None]]:
    """Step 1: ``WATCH`` and the reads; return the per-batch replies (three each), the server
    ms and the server's ``run_id``."""
    watched = list(dict.fromkeys(key for triple in keys for key in triple))
    reads: list[tuple[Any, ...]] = [("WATCH", *watched), ("TIME",)]
    if server is None:
        reads.append(("INFO", "server"))
    head = len(reads)  # replies before the per-batch ones
    for batch, (meta, events, writers) in zip(batches, keys, strict=True):
        reads += (
            ("HMGET", meta, "created_ms", "sealed", "events", "bytes", "t", "ep", "srv", "epochs"),
            ("HGET", writers, batch.writer),
            ("TYPE", events),
        )
    replies = yield RoundTrip(reads)
    if any(isinstance(reply, Exception) for reply in replies[:head]):
        raise (yield from _unwatched())
    if server is None:
        server = _run_id(replies[2])
        yield Remember(server)
    now_sec, now_us = replies[1]
    return replies[head:], int(now_sec) * 1000 + int(now_us) // 1000, server


def _xadds(
    events: str, tail: int, size: int, ms: int, epoch: int, batch: AppendBatch
) -> tuple[bytes | None, int]:
    """The batch's ``XADD``s, packed, and the segment's byte count after them; ``None`` if an
    event is over the limit (payload and headers, as ``append_events.lua`` counts it). Fields
    in ``append_events.lua``'s order: ``k`` and ``h`` only when the event has them."""
    key = events.encode()
    key_part = b"$%d\r\n%s\r\n" % (len(key), key)
    keyed_head = b"*13\r\n$4\r\nXADD\r\n" + key_part
    keyless_head = b"*11\r\n$4\r\nXADD\r\n" + key_part
    keyed_h_head = b"*15\r\n$4\r\nXADD\r\n" + key_part
    keyless_h_head = b"*13\r\n$4\r\nXADD\r\n" + key_part
    epoch_part = b"-%d" % epoch
    time_part = b"$1\r\nt\r\n$%d\r\n%d\r\n$1\r\nb\r\n" % (len(b"%d" % ms), ms)
    limit = batch.max_event_size
    written_ms: Any = None
    written_part = b""
    out: list[bytes] = []
    append = out.append
    args = batch.event_args
    offset = tail + 1
    # the lengths of the id and of the byte offset, kept up to date as they grow a digit
    id_length, id_bound = len(b"%d" % offset) + len(epoch_part), _next_power(offset)
    at_length, at_bound = len(b"%d" % size), _next_power(size)
    for wire, payload, writer_ms, headers in zip(
        args[0::4], args[1::4], args[2::4], args[3::4], strict=True
    ):
        length = len(payload)
        if headers:
            if length + len(headers) > limit:
                return None, size
            before = _fields_with_headers(wire, headers)
            head = keyed_h_head if wire else keyless_h_head
        elif length > limit:
            return None, size
        else:
            before = _fields_before_payload(wire)
            head = keyed_head if wire else keyless_head
        if writer_ms != written_ms:
            text = b"%d" % writer_ms
            written_ms, written_part = writer_ms, b"$1\r\nw\r\n$%d\r\n%s\r\n" % (len(text), text)
        if offset >= id_bound:
            id_length, id_bound = id_length + 1, id_bound * 10
        while size >= at_bound:
            at_length, at_bound = at_length + 1, at_bound * 10
        append(
            b"%s$%d\r\n%d%s\r\n%s$%d\r\n%s\r\n%s%s$%d\r\n%d\r\n"
            % (
                head,
                id_length,
                offset,
                epoch_part,
                before,
                length,
                payload,
                written_part,
                time_part,
                at_length,
                size,
            )
        )
        offset += 1
        size += length
    return b"".join(out), size


def _next_power(number: int) -> int:
    """The smallest power of ten above ``number`` (``number`` >= 0): where it gains a digit."""
    power: int = 10 ** len(b"%d" % number)
    return power


@functools.lru_cache(maxsize=65536)
def _fields_before_payload(wire: Any) -> bytes:
    """An ``XADD``'s fields between its id and its payload for the wire routing key ``wire``
    (``""``: no key, else ``"k" + key``): the ``k`` field, if any, and ``p``'s name."""
    if not wire:
        return b"$1\r\np\r\n"
    routing = wire[1:].encode() if isinstance(wire, str) else bytes(wire[1:])
    return b"$1\r\nk\r\n$%d\r\n%s\r\n$1\r\np\r\n" % (len(routing), routing)


_PAYLOAD_NAME = b"$1\r\np\r\n"


def _fields_with_headers(wire: Any, headers: bytes) -> bytes:
    """:func:`_fields_before_payload` for an event with (packed) headers: ``k`` (if any),
    then ``h``, then ``p``'s name."""
    keyed = _fields_before_payload(wire)[: -len(_PAYLOAD_NAME)]
    return b"%s$1\r\nh\r\n$%d\r\n%s\r\n%s" % (keyed, len(headers), headers, _PAYLOAD_NAME)


def _skip(connection: Any, count: int) -> None:
    """Read and drop ``count`` replies: the ``QUEUED`` ones, one per event. A command refused
    when queued makes ``EXEC`` abort, and that is what is checked; so these are only consumed,
    straight from the hiredis reader where there is one (redis-py's ``read_response`` costs
    more than the rest of the event's client work together), else one by one."""
    parser: Any = getattr(connection, "_parser", None)
    reader = getattr(parser, "_reader", None)
    if type(parser) is not _HIREDIS_PARSER or reader is None:
        for _ in range(count):
            _read(connection)
        return
    gets = reader.gets
    push = getattr(parser, "_hiredis_PushNotificationType", None) or ()  # RESP3 pushes
    try:
        while count:
            reply = gets()
            if reply is NOT_ENOUGH_DATA:
                parser.read_from_socket()
            elif isinstance(reply, redis.ConnectionError):  # as redis-py raises it (LOADING)
                raise reply
            elif isinstance(reply, push):  # not a reply: handled as redis-py does
                parser.handle_push_response(reply)
            else:
                count -= 1
    except OSError as exc:  # as redis-py's read_response words it
        raise redis.ConnectionError(f"error while reading from the server: {exc.args}") from exc


def _unwatched() -> Generator[RoundTrip, Any, NativeAppendConflictError]:
    """``UNWATCH``; the error that sends the round through the script (nothing written)."""
    yield RoundTrip([("UNWATCH",)])
    return NativeAppendConflictError()
