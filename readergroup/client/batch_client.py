"""Low-level reads: ranges of segments in batches, and blocking reads across segments.

For tools, the Spark source and readers. Offsets are event offsets (see
:mod:`readergroup.storage.keys`); ranges are half-open ``[start, end)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from readergroup.admin.stream_manager import StreamManager
from readergroup.core.errors import CorruptSegmentError, DataLostError
from readergroup.core.names import validate_name
from readergroup.core.planning import SegmentRange, plan_ranges
from readergroup.core.routing import segment_name
from readergroup.core.stream_cut import StreamCut
from readergroup.storage.connection_api import Connection
from readergroup.storage.segment_records import SegmentEvent, SegmentState


class BatchClient:
    """Reads a scope's streams segment by segment. Thread-safe."""

    def __init__(self, connection: Connection, scope: str) -> None:
        self._connection = connection
        self._scope = validate_name(scope, "scope")
        self._manager = StreamManager(connection)

    @property
    def scope(self) -> str:
        return self._scope

    def get_segments(
        self, stream: str, start: StreamCut | None = None, end: StreamCut | None = None
    ) -> list[SegmentRange]:
        """Every segment range between ``start`` (default: the head) and ``end`` (default: the
        current tails), predecessors before successors, across scaling."""
        state = self._manager.stream_state(self._scope, stream)
        for cut in (start, end):
            if cut is not None:
                if (cut.scope, cut.stream) != (self._scope, stream):
                    from readergroup.core.errors import InvalidStreamCutError

                    raise InvalidStreamCutError(
                        f"cut is for {cut.scoped_stream}, not {self._scope}/{stream}"
                    )
                self._manager.check_cut(cut)
        begin = dict(start.positions) if start is not None else dict(state.head)
        tails = {
            s: st.tail
            for s, st in self._connection.segments.segment_states(
                self._scope, stream, list(state.segments)
            ).items()
        }
        return plan_ranges(state, begin, dict(end.positions) if end is not None else None, tails)

    def segment_states(self, stream: str, segments: list[int]) -> dict[int, SegmentState]:
        return self._connection.segments.segment_states(self._scope, stream, segments)

    def read_segment(
        self,
        stream: str,
        segment: int,
        start: int = 0,
        end: int = -1,
        batch_size: int = 1000,
        *,
        fail_on_data_loss: bool = True,
    ) -> Iterator[list[SegmentEvent]]:
        """Yield the events ``[start, end)`` of one segment in batches of up to ``batch_size``
        (``end=-1``: up to the tail as it is when the read reaches it). Raises
        TruncatedDataError if ``start`` is below the head. Offsets lost in a failover (the
        segment's recorded ``lost`` ranges) raise :class:`DataLostError` after the events
        before them, or are skipped with ``fail_on_data_loss=False``; any other gap in the
        offsets is :class:`CorruptSegmentError` after the events before it."""
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        position = start
        while end < 0 or position < end:
            state, events = self._connection.segments.read_range(
                self._scope, stream, segment, position, end, batch_size
            )
            if not events:
                return
            run = 0
            while run < len(events) and events[run].offset == position + run:
                run += 1
            if run:
                yield events[:run]
            if run < len(events):  # a gap: [position + run, the next offset)
                position = self._past_gap(
                    stream, segment, position + run, events[run].offset, fail_on_data_loss
                )
                continue
            position = events[-1].offset + 1
            if position >= state.tail and end < 0:
                return

    def _past_gap(
        self, stream: str, segment: int, begin: int, resume: int, fail_on_data_loss: bool
    ) -> int:
        """Where reading goes on after the missing offsets ``[begin, resume)``, or the error."""
        segments = self._connection.segments
        name = segment_name(self._scope, stream, segment)
        if not segments.lost_in_failover(self._scope, stream, segment, begin, resume):
            key = self._connection.keys.segment(self._scope, stream, segment).events
            raise CorruptSegmentError(
                name,
                key,
                f"offsets {begin}..{resume - 1} are missing (entries out of sequence, not "
                "written by this library)",
            )
        if fail_on_data_loss:
            raise DataLostError(
                f"segment {name}: offsets {begin}..{resume - 1} were lost in a failover "
                "(acknowledged, then a replica without them took over); "
                "fail_on_data_loss=False skips them"
            )
        return resume

    def read_range(
        self, stream: str, segment_range: SegmentRange, batch_size: int = 1000
    ) -> Iterator[list[SegmentEvent]]:
        return self.read_segment(
            stream, segment_range.segment, segment_range.start, segment_range.end, batch_size
        )

    def read_events(
        self,
        stream: str,
        start: StreamCut | None = None,
        end: StreamCut | None = None,
        batch_size: int = 1000,
    ) -> Iterator[SegmentEvent]:
        """Every event between the cuts, segment by segment in planned order (so each routing
        key comes out in write order)."""
        for segment_range in self.get_segments(stream, start, end):
            for batch in self.read_range(stream, segment_range, batch_size):
                yield from batch

    def read_blocking(
        self, stream: str, positions: Mapping[int, int], timeout: float, limit: int = 1000
    ) -> dict[int, list[SegmentEvent]]:
        """Events at or after each position, from several segments in one blocking call
        (``XREAD BLOCK``, up to 5 s per call)."""
        return self._connection.segments.read_blocking(
            self._scope, stream, positions, timeout, limit
        )
