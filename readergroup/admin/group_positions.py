"""Where a reader group starts, ends and stands: resolving start positions, end cuts, and
turning group positions into per-stream stream cuts. Talks to streams through
:class:`~readergroup.admin.stream_steps.StreamSteps`, as procedures (threaded or asyncio)."""

from __future__ import annotations

from collections.abc import Mapping

from readergroup.admin.stream_steps import StreamSteps
from readergroup.core.calls import Steps
from readergroup.core.errors import InvalidStreamCutError
from readergroup.core.group_config import ReaderGroupConfig, StartPosition, start_word
from readergroup.core.group_state import SegKey
from readergroup.core.planning import plan_ranges
from readergroup.core.stream_cut import StreamCut


def resolve_start(
    streams: StreamSteps, scope: str, stream: str, start: StartPosition
) -> Steps[StreamCut]:
    """The stream cut a start position means now."""
    start = start_word(start)  # type: ignore[assignment]
    if isinstance(start, StreamCut):
        if (start.scope, start.stream) != (scope, stream):
            raise InvalidStreamCutError(f"cut is for {start.scoped_stream}, not {scope}/{stream}")
        yield from streams.check_cut(start)
        return start
    if start == "head":
        return (yield from streams.head_cut(scope, stream))
    if start == "tail":
        return (yield from streams.tail_cut(scope, stream))
    if isinstance(start, bool) or not isinstance(start, int):
        raise InvalidStreamCutError(f"not a start position: {start!r}")
    return (yield from streams.cut_at_time(scope, stream, start))


def resolve_group(
    streams: StreamSteps,
    default_scope: str,
    config: ReaderGroupConfig,
    start: StartPosition | Mapping[str, StartPosition] | None = None,
) -> Steps[tuple[dict[SegKey, int], dict[SegKey, int] | None]]:
    """``(starts, end)`` for a group: every segment's start offset, and, for a bounded group,
    the end offset of every segment it may read (``None``: unbounded)."""
    starts: dict[SegKey, int] = {}
    end: dict[SegKey, int] | None = None
    for scope, stream in config.scoped_streams(default_scope):
        scoped = f"{scope}/{stream}"
        if start is None:
            chosen = config.start_for(stream, scoped)
        elif isinstance(start, Mapping):
            chosen = start.get(stream, start.get(scoped, "head"))
        else:
            chosen = start
        cut = yield from resolve_start(streams, scope, stream, chosen)
        starts.update({(scoped, s): o for s, o in cut.positions.items()})
        end_cut = config.end_for(stream, scoped)
        if end_cut is not None:
            yield from streams.check_cut(end_cut)
            state = yield from streams.stream_state(scope, stream)
            states = yield from streams.segment_states(scope, stream, list(state.segments))
            tails = {s: st.tail for s, st in states.items()}
            ranges = plan_ranges(state, dict(cut.positions), dict(end_cut.positions), tails)
            end = end or {}
            end.update({(scoped, r.segment): r.end for r in ranges})
    return starts, end


def cuts_by_stream(positions: Mapping[SegKey, int]) -> dict[str, StreamCut]:
    """Group positions as one :class:`StreamCut` per ``"scope/stream"``."""
    grouped: dict[str, dict[int, int]] = {}
    for (scoped, segment), offset in positions.items():
        grouped.setdefault(scoped, {})[segment] = offset
    out = {}
    for scoped, segments in grouped.items():
        scope, _, stream = scoped.partition("/")
        out[scoped] = StreamCut(scope, stream, segments)
    return out
