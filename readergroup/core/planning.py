"""Which segment ranges lie between two stream cuts, across scaling. Pure code.

Used by batch reads, the Spark source and tools: given a stream's metadata, a start cut, an
optional end cut and the segments' current tails, list every ``(segment, start, end)`` to read
so that each event between the cuts is covered exactly once, predecessors before successors.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from readergroup.core.stream_metadata import StreamState


@dataclass(frozen=True, slots=True)
class SegmentRange:
    """Events ``[start, end)`` of ``segment``; ``predecessors`` must be read before it."""

    segment: int
    start: int
    end: int
    predecessors: tuple[int, ...] = ()

    @property
    def events(self) -> int:
        return max(0, self.end - self.start)


def _reachable(
    state: StreamState, roots: Mapping[int, int] | set[int], successors: bool
) -> set[int]:
    """Segments reachable from ``roots`` by successor (else predecessor) links, roots excluded."""

    def links(segment: int) -> tuple[int, ...]:
        record = state.segments[segment]
        return record.successors if successors else record.predecessors

    found: set[int] = set()
    frontier = [s for root in roots for s in links(root)]
    while frontier:
        segment = frontier.pop()
        if segment not in found:
            found.add(segment)
            frontier.extend(links(segment))
    return found


def descendants(state: StreamState, roots: Mapping[int, int] | set[int]) -> set[int]:
    """Every segment reachable from ``roots`` through successor links, roots excluded."""
    return _reachable(state, roots, successors=True)


def ancestors(state: StreamState, roots: Mapping[int, int] | set[int]) -> set[int]:
    """Every segment reachable from ``roots`` through predecessor links, roots excluded."""
    return _reachable(state, roots, successors=False)


def plan_ranges(
    state: StreamState,
    start: Mapping[int, int],
    end: Mapping[int, int] | None,
    tails: Mapping[int, int],
) -> list[SegmentRange]:
    """Ranges between ``start`` and ``end`` (``None``: up to ``tails``), in topological order.

    A segment of the start cut begins at its cut offset; a successor begins at 0 (or its head,
    if it is in ``start``). A segment of the end cut stops at its end offset and its
    successors are not read; every other segment is read to its tail, and a sealed one leads
    on to its successors. Segments past the end cut are left out.
    """
    beyond = descendants(state, end) if end is not None else set()
    order: list[int] = []
    seen: set[int] = set()
    frontier = deque(sorted(start))
    while frontier:
        segment = frontier.popleft()
        if segment in seen or segment in beyond:
            continue
        record = state.segments[segment]
        # a merge successor waits until all its predecessors in the plan have been placed
        waiting = [
            p for p in record.predecessors if p not in seen and _planned(p, state, start, beyond)
        ]
        if waiting and segment not in start:
            frontier.append(segment)
            continue
        seen.add(segment)
        order.append(segment)
        if end is not None and segment in end:
            continue
        frontier.extend(s for s in record.successors if s not in seen)
    ranges = []
    for segment in order:
        first = start.get(segment, state.head.get(segment, 0))
        last = end[segment] if end is not None and segment in end else tails.get(segment, first)
        ranges.append(
            SegmentRange(segment, first, max(first, last), state.segments[segment].predecessors)
        )
    return ranges


def _planned(segment: int, state: StreamState, start: Mapping[int, int], beyond: set[int]) -> bool:
    """Whether ``segment`` will be part of the plan (it descends from the start cut)."""
    return segment not in beyond and (
        segment in start or bool(ancestors(state, {segment}) & set(start))
    )


def scale_group(state: StreamState, segment: int) -> tuple[set[int], set[int]]:
    """The predecessors and successors of the scale that sealed ``segment``, found through
    that scale's links (no successors for a segment still active or sealed with the stream)."""
    predecessors, successors = {segment}, set()
    frontier = [segment]
    while frontier:
        for succ in state.segments[frontier.pop()].successors:
            if succ not in successors:
                successors.add(succ)
                for pred in state.segments[succ].predecessors:
                    if pred not in predecessors:
                        predecessors.add(pred)
                        frontier.append(pred)
    return predecessors, successors


def time_positions(state: StreamState, locate: Callable[[int], tuple[int, int]]) -> dict[int, int]:
    """The stream cut at a point in time, exact per segment.

    ``locate(segment)`` gives the segment's first offset appended at or after the time (at
    least its head; its tail when every event is older) and its tail. Walking from the head,
    a segment holding an event at or after the time, or still active, is in the cut at that
    offset; a sealed segment whose events are all older is passed, and its scale's successors
    are entered once every predecessor of that scale is passed. A passed segment whose
    successors are not entered stays in the cut at its tail, so the cut covers the key space.

    Exact because a successor takes no event before all its predecessors are sealed (see
    ``create_closed_segment.lua``): reading from the cut returns exactly the events appended
    at or after the time, reading up to it exactly those before.

    >>> from readergroup.core.stream_metadata import ScaleStream, initial_state
    >>> from readergroup.core.stream_config import StreamConfiguration, ScalingPolicy
    >>> s = initial_state("a", "b", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)), 0)
    >>> s = ScaleStream(1, (0,), ((0.0, 0.5), (0.5, 1.0)), 0).apply_to(s)
    >>> time_positions(s, {0: (10, 10), 4294967297: (3, 5), 4294967298: (0, 0)}.__getitem__)
    {4294967297: 3, 4294967298: 0}
    >>> time_positions(s, {0: (7, 10)}.__getitem__)
    {0: 7}
    """
    cut: dict[int, int] = {}
    passed: dict[int, int] = {}
    entered: set[int] = set()
    seen: set[int] = set()
    # per scale, walked once: its predecessors, successors and the predecessors not yet passed
    scales: dict[int, tuple[set[int], set[int], set[int]]] = {}
    frontier = deque(sorted(state.head))
    while frontier:
        segment = frontier.popleft()
        if segment in seen:
            continue
        seen.add(segment)
        record = state.segments[segment]
        offset, tail = locate(segment)
        if record.active or offset < tail:
            cut[segment] = offset
            continue
        passed[segment] = tail
        scale = scales.get(segment)
        if scale is None:
            predecessors, successors = scale_group(state, segment)
            unpassed = {
                p for p in predecessors if p not in passed and not state.segments[p].truncated
            }
            scale = (predecessors, successors, unpassed)
            scales.update(dict.fromkeys(predecessors, scale))
        predecessors, successors, unpassed = scale
        unpassed.discard(segment)
        if successors and not unpassed:
            entered |= predecessors
            frontier.extend(sorted(successors - seen))
    cut.update({s: tail for s, tail in passed.items() if s not in entered})
    return dict(sorted(cut.items()))


def completed_merge_siblings(state: StreamState, positions: Mapping[int, int]) -> set[int]:
    """Segments a cut leaves out because they were read to their end: the other predecessors
    of a merge that a segment of the cut leads to, not covered by the cut.

    A reader group checkpointed while one predecessor of a merge is complete and another is
    being read records only the one being read (``{1: 60}`` for ``0, 1 -> 2``); the complete
    one belongs in the cut at its (final) tail.

    >>> from readergroup.core.stream_metadata import ScaleStream, initial_state
    >>> from readergroup.core.stream_config import StreamConfiguration, ScalingPolicy
    >>> s = initial_state("a", "b", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)), 0)
    >>> s = ScaleStream(1, (0, 1), ((0.0, 1.0),), 0).apply_to(s)
    >>> completed_merge_siblings(s, {1: 60})
    {0}
    """
    covered = set(positions) | ancestors(state, positions) | descendants(state, positions)
    found: set[int] = set()
    entered: set[int] = set()  # each successor's predecessors looked at once (a merge of S: O(S))
    frontier = list(positions)
    while frontier:
        for succ in state.segments[frontier.pop()].successors:
            if succ in entered:
                continue
            entered.add(succ)
            for pred in state.segments[succ].predecessors:
                if pred not in covered and pred not in found and not state.segments[pred].active:
                    found.add(pred)
                    frontier.append(pred)
    return found


def skip_lost(state: StreamState, positions: Mapping[int, int]) -> dict[int, int]:
    """A start cut with what truncation deleted skipped, and nothing else.

    Segments of the cut still stored start at ``max(offset, head)``; a segment truncated
    away is replaced by the head's segments in its lineage (its descendants in the head
    cut), so only the lost part of the key space moves forward.

    >>> from readergroup.core.stream_metadata import ScaleStream, TruncateStream, initial_state
    >>> from readergroup.core.stream_config import StreamConfiguration, ScalingPolicy
    >>> s = initial_state("a", "b", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)), 0)
    >>> s = ScaleStream(1, (0,), ((0.0, 0.25), (0.25, 0.5)), 0).apply_to(s)
    >>> s = TruncateStream(((1, 5), (4294967298, 3), (4294967299, 0)), (0,)).apply_to(s)
    >>> skip_lost(s, {0: 40, 1: 220})
    {1: 220, 4294967298: 3, 4294967299: 0}
    """
    out: dict[int, int] = {}
    for segment, offset in positions.items():
        record = state.segments[segment]
        if not record.truncated:
            out[segment] = max(offset, state.head.get(segment, 0))
            continue
        lineage = descendants(state, {segment})
        for head_segment, head_offset in state.head.items():
            if head_segment in lineage:
                out[head_segment] = max(out.get(head_segment, 0), head_offset)
    return dict(sorted(out.items()))
