"""What a reader hands out (:class:`EventRead`) and who hears of its segment changes
(:class:`RebalanceListener`, :class:`EventSource`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from readergroup.core.group_state import SegKey
from readergroup.core.headers import NO_HEADERS, decode_headers
from readergroup.storage.segment_records import (
    event_offset,
    raw_headers_of,
    server_ms_of,
    writer_ms_of,
)

T = TypeVar("T")


class EventRead(Generic[T]):
    """What ``read_next_event`` returns: an event read from a segment (``is_event``), a
    checkpoint (``is_checkpoint``), or :data:`NOTHING` when nothing came in time. ``event`` is
    the deserialized value: ``None`` for a checkpoint and for nothing, and for an event whose
    deserializer returned ``None`` (so test ``is_event``, not ``event is None``).

    Attributes: ``event``, ``routing_key``, ``stream`` (``"scope/stream"``), ``segment``,
    ``offset``, ``position`` (``(stream, segment, offset + 1)``: where the reader stands in that
    segment after this event), ``timestamp`` (the writer's clock at ``write_event``, ms),
    ``server_time_ms`` (when Redis appended it), ``fencing_token`` (grows with every change of
    the segment's owner: pass it to your sink to refuse a reader that lost the segment),
    ``headers`` (what the writer passed to ``write_event(..., headers=...)``: a read-only
    mapping of str to bytes, empty when none), ``is_checkpoint`` and ``checkpoint_name``.

    One object per event: it keeps the stored event as a flat tuple of the bytes Redis returned
    (:func:`~readergroup.storage.segment_records.stored_events`) and decodes the details from it
    on first access, so reading many events stays cheap.
    """

    __slots__ = ("_entry", "_origin", "checkpoint_name", "event")

    def __init__(
        self,
        event: T | None,
        entry: tuple[Any, ...] | None = None,
        origin: tuple[str, int, int] | None = None,
        *,
        checkpoint_name: str | None = None,
    ) -> None:
        self.event = event
        self._entry = entry
        self._origin = origin
        """``(stream, segment, fencing token)``, shared by the events of one segment owned
        once."""
        self.checkpoint_name = checkpoint_name

    @property
    def is_checkpoint(self) -> bool:
        return self.checkpoint_name is not None

    @property
    def is_event(self) -> bool:
        """Whether this is an event read from a segment (whatever its value, ``None``
        included); false for :data:`NOTHING` and for a checkpoint."""
        return self._entry is not None

    @property
    def stream(self) -> str | None:
        return None if self._origin is None else self._origin[0]

    @property
    def segment(self) -> int | None:
        return None if self._origin is None else self._origin[1]

    @property
    def fencing_token(self) -> int | None:
        return None if self._origin is None else self._origin[2]

    @property
    def routing_key(self) -> str | None:
        if self._entry is None:
            return None
        key: bytes | None = self._entry[1]
        return None if key is None else key.decode("utf-8", "surrogateescape")

    @property
    def payload(self) -> bytes | None:
        """The event's stored bytes, before the deserializer (``None`` when not an event)."""
        if self._entry is None:
            return None
        data: bytes = self._entry[2]
        return bytes(data)

    @property
    def headers(self) -> Mapping[str, bytes]:
        """The event's headers, read-only; empty for an event without any and when not an
        event. Decoded when asked for, on each access (keep the mapping to use it often); events
        without headers cost nothing. Raises
        :class:`~readergroup.core.errors.SerializationError` naming the segment and offset
        if the stored headers are not a map of str to bytes (not written by this library)."""
        entry = self._entry
        if entry is None:
            return NO_HEADERS
        raw = raw_headers_of(entry)
        if raw is None:
            return NO_HEADERS
        return decode_headers(
            raw, f"stream {self.stream} segment {self.segment} offset {self.offset}"
        )

    @property
    def offset(self) -> int | None:
        return None if self._entry is None else event_offset(self._entry)

    @property
    def timestamp(self) -> int | None:
        return None if self._entry is None else writer_ms_of(self._entry)

    @property
    def server_time_ms(self) -> int | None:
        return None if self._entry is None else server_ms_of(self._entry)

    @property
    def position(self) -> tuple[str, int, int] | None:
        if self._entry is None or self._origin is None:
            return None
        return self._origin[0], self._origin[1], event_offset(self._entry) + 1

    def __repr__(self) -> str:
        if self.is_checkpoint:
            return f"EventRead(checkpoint={self.checkpoint_name!r})"
        if self._entry is None:
            return "EventRead(event=None)"
        return (
            f"EventRead(event={self.event!r}, routing_key={self.routing_key!r}, "
            f"stream={self.stream!r}, segment={self.segment}, offset={self.offset})"
        )


def by_segment(events: Sequence[EventRead[T]]) -> list[tuple[SegKey, list[EventRead[T]]]]:
    """``events`` cut into runs of consecutive events of one segment (as a read hands them out:
    a run per segment visited), each with its segment; the order within a segment is kept."""
    runs: list[tuple[SegKey, list[EventRead[T]]]] = []
    origin: Any = None
    run: list[EventRead[T]] = []
    for event in events:
        if event._origin is not origin:
            origin = event._origin
            run = []
            key = (origin[0], origin[1]) if origin is not None else ("", 0)
            runs.append((key, run))
        run.append(event)
    return runs


NOTHING: EventRead[Any] = EventRead(None)
"""The answer of a read that found nothing in time (shared: it carries no data)."""


class RebalanceListener(Protocol):
    """Hears of this reader's segment changes. Every call comes from the **reading thread**,
    inside a read call (``read_next_event``, ``read_batch``, iteration, ``run``'s reading
    thread), before that call hands out anything; ``close()`` calls it on the closing thread.

    * ``on_segments_released(reader_id, segments)``: the segments are about to be given up
      (a rebalance, or ``close``). They are still this reader's: a ``commit()`` made here
      lands, and the next owner starts there. Every event of them handed out before was
      processed (the application called again); nothing more of them is handed out. Also
      called, after the fact, for segments read to their end and completed.
    * ``on_segments_acquired(reader_id, segments)``: the segments are this reader's now; no
      event of them is handed out before this returns.
    * ``on_segments_lost(reader_id, segments)`` (optional; else ``on_segments_released``):
      the segments were taken away (the reader was removed or fenced, or the group reset);
      others may read them already, and nothing can be committed for them.

    A listener that raises does not stop the change: the read call raises
    :class:`~readergroup.core.errors.RebalanceListenerError` after carrying it out.
    """

    def on_segments_acquired(self, reader_id: str, segments: Sequence[SegKey]) -> None: ...

    def on_segments_released(self, reader_id: str, segments: Sequence[SegKey]) -> None: ...


class EventSource(Protocol[T]):
    """What :func:`~readergroup.client.runner.run` needs of a reader (an
    :class:`~readergroup.client.reader.EventStreamReader`)."""

    def add_rebalance_listener(self, listener: RebalanceListener) -> None: ...

    def owned_segments(self) -> dict[SegKey, int]: ...

    def pause(self, segments: Iterable[SegKey]) -> None: ...

    def resume(self, segments: Iterable[SegKey]) -> None: ...

    def paused(self) -> set[SegKey]: ...

    def read_batch(
        self, max_events: int = 1000, timeout: float | None = None
    ) -> list[EventRead[T]]: ...

    def commit(self, positions: Mapping[SegKey, int] | None = None) -> None: ...

    def rejoin(self, stop: threading.Event | None = None) -> int: ...
