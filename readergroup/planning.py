"""Which segment ranges lie between two stream cuts, across scaling. Pure code.

Used by batch reads, the Spark source and tools: given a stream's metadata, a start cut, an
optional end cut and the segments' current tails, list every ``(segment, start, end)`` to read
so that each event between the cuts is covered exactly once, predecessors before successors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from readergroup.stream_metadata import StreamState


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
    frontier = sorted(start)
    while frontier:
        segment = frontier.pop(0)
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
