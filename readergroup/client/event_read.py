"""What a reader hands out (:class:`EventRead`) and who hears of its segment changes
(:class:`RebalanceListener`, :class:`EventSource`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from readergroup.core.group_state import SegKey
from readergroup.storage.segment_records import SegmentEvent

T = TypeVar("T")


class EventRead(Generic[T]):
    """What ``read_next_event`` returns. ``event`` is ``None`` when nothing came in time.

    Attributes: ``event``, ``routing_key``, ``stream`` (``"scope/stream"``), ``segment``,
    ``offset``, ``position`` (``(stream, segment, offset + 1)``: where the reader stands in that
    segment after this event), ``timestamp`` (the writer's clock at ``write_event``, ms),
    ``server_time_ms`` (when Redis appended it), ``fencing_token`` (grows with every change of
    the segment's owner: pass it to your sink to refuse a reader that lost the segment),
    ``is_checkpoint`` and ``checkpoint_name``. Details are decoded from the stored event on
    first access, so reading many events stays cheap.
    """

    __slots__ = ("_raw", "checkpoint_name", "event", "fencing_token", "is_checkpoint", "stream")

    def __init__(
        self,
        event: T | None,
        raw: SegmentEvent | None = None,
        stream: str | None = None,
        fencing_token: int | None = None,
        *,
        is_checkpoint: bool = False,
        checkpoint_name: str | None = None,
    ) -> None:
        self.event = event
        self._raw = raw
        self.stream = stream
        self.fencing_token = fencing_token
        self.is_checkpoint = is_checkpoint
        self.checkpoint_name = checkpoint_name

    @property
    def routing_key(self) -> str | None:
        return None if self._raw is None else self._raw.routing_key

    @property
    def segment(self) -> int | None:
        return None if self._raw is None else self._raw.segment

    @property
    def offset(self) -> int | None:
        return None if self._raw is None else self._raw.offset

    @property
    def timestamp(self) -> int | None:
        return None if self._raw is None else self._raw.writer_ms

    @property
    def server_time_ms(self) -> int | None:
        return None if self._raw is None else self._raw.server_ms

    @property
    def position(self) -> tuple[str, int, int] | None:
        if self._raw is None or self.stream is None:
            return None
        return self.stream, self._raw.segment, self._raw.offset + 1

    def __repr__(self) -> str:
        if self.is_checkpoint:
            return f"EventRead(checkpoint={self.checkpoint_name!r})"
        if self._raw is None:
            return "EventRead(event=None)"
        return (
            f"EventRead(event={self.event!r}, routing_key={self.routing_key!r}, "
            f"stream={self.stream!r}, segment={self.segment}, offset={self.offset})"
        )


NOTHING: EventRead[Any] = EventRead(None)
"""The answer of a read that found nothing in time (shared: it carries no data)."""


class RebalanceListener(Protocol):
    """Called from the reading thread when this reader's segments change.

    A listener may also define ``on_segments_lost(reader_id, segments)``: called instead of
    ``on_segments_released`` when the reader was fenced (session expired, e.g. during a Redis
    outage) and the segments may already be read by others; nothing can be committed for them.
    """

    def on_segments_acquired(self, reader_id: str, segments: Sequence[SegKey]) -> None: ...

    def on_segments_released(self, reader_id: str, segments: Sequence[SegKey]) -> None: ...


class EventSource(Protocol[T]):
    """What :func:`~readergroup.client.runner.run` needs of a reader (an
    :class:`~readergroup.client.reader.EventStreamReader`)."""

    def add_rebalance_listener(self, listener: RebalanceListener) -> None: ...

    def owned_segments(self) -> dict[SegKey, int]: ...

    def read_batch(
        self, max_events: int = 1000, timeout: float | None = None
    ) -> list[EventRead[T]]: ...

    def commit(self, positions: Mapping[SegKey, int] | None = None) -> None: ...

    def rejoin(self, stop: threading.Event | None = None) -> int: ...
