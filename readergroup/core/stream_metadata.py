"""A stream's metadata as a replicated state, and the updates that change it. Pure code.

The state lives in a state synchronizer named ``stream:<scope>/<stream>`` (no controller
process). Transitions, each one :class:`~statesync.Update` appended conditionally:

* creation (``initialize``): epoch 0 with ``min_segments`` uniform segments ``0..n-1``;
* :class:`ScaleStream`: a new epoch; the sealed segments leave the active set, successors
  covering exactly their key ranges join it, linked both ways (predecessors/successors);
* :class:`SealStream`: no segment is active any more; the stream takes no writes;
* :class:`TruncateStream`: the head moves forward to a stream cut; segments wholly before it
  are marked truncated;
* :class:`UpdateStreamConfig`: a new configuration (segment count changes only by scaling).

Invariants (checked by the tests over random histories): the active segments' ranges cover
``[0, 1)`` exactly unless the stream is sealed; every epoch lists the segments active in it;
predecessor and successor links are symmetric; the head only moves forward.

Data-plane order (done by :class:`~readergroup.admin.stream_manager.StreamManager`): successors are
created closed before the metadata names them, predecessors are sealed in Redis after it does,
and the successors are opened last; an interrupted scale is completed by
``StreamManager.complete_scales`` (and readers seal a predecessor they reach the end of).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from readergroup.core.errors import InvalidKeyRangesError, ScaleConflictError, StreamSealedError
from readergroup.core.routing import RangeMap, check_exact_cover, segment_id, uniform_ranges
from readergroup.core.stream_config import (
    MAX_SEGMENTS,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
)
from statesync import Update


@dataclass(frozen=True, slots=True)
class SegmentRecord:
    """One segment: its key range, links, and when it stopped taking writes."""

    segment_id: int
    low: float
    high: float
    predecessors: tuple[int, ...] = ()
    successors: tuple[int, ...] = ()
    sealed_epoch: int = -1
    """Epoch whose creation sealed this segment; -1 while active."""
    truncated: bool = False
    """Every event of the segment is below the stream's head (its data is deleted)."""

    @property
    def active(self) -> bool:
        return self.sealed_epoch < 0


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """The segments active from ``created_ms`` (server time) until the next epoch.

    ``created_ms`` is when the scale was planned, before its metadata update and seals: an
    approximate boundary for display. Time cuts use the events' own server times instead
    (:func:`readergroup.core.planning.time_positions`)."""

    epoch: int
    segments: tuple[int, ...]
    created_ms: int


@dataclass(frozen=True, slots=True)
class StreamState:
    """All metadata of one stream."""

    scope: str
    stream: str
    config: StreamConfiguration
    created_ms: int
    segments: Mapping[int, SegmentRecord]
    epochs: tuple[EpochRecord, ...]
    next_number: int
    head: Mapping[int, int]
    """The truncation point as a stream cut: segment id -> first offset still readable."""
    sealed_ms: int = -1

    @property
    def epoch(self) -> int:
        return self.epochs[-1].epoch

    @property
    def sealed(self) -> bool:
        return self.sealed_ms >= 0

    @property
    def active_segments(self) -> list[SegmentRecord]:
        """Active segments ordered by key range (empty once sealed)."""
        return sorted(
            (self.segments[s] for s in self.epochs[-1].segments if self.segments[s].active),
            key=lambda r: r.low,
        )

    def range_map(self) -> RangeMap:
        return RangeMap([(r.segment_id, r.low, r.high) for r in self.active_segments])


def initial_state(
    scope: str, stream: str, config: StreamConfiguration, created_ms: int
) -> StreamState:
    """Epoch 0 with ``config.scaling_policy.min_segments`` uniform segments."""
    count = config.scaling_policy.min_segments
    records = {
        segment_id(0, n): SegmentRecord(segment_id(0, n), low, high)
        for n, (low, high) in enumerate(uniform_ranges(count))
    }
    return StreamState(
        scope=scope,
        stream=stream,
        config=config,
        created_ms=created_ms,
        segments=records,
        epochs=(EpochRecord(0, tuple(records), created_ms),),
        next_number=count,
        head=dict.fromkeys(records, 0),
    )


@dataclass(frozen=True)
class ScaleStream(Update):
    """Seal ``sealed`` and open successors over ``new_ranges``, as epoch ``epoch``."""

    epoch: int
    sealed: tuple[int, ...]
    new_ranges: tuple[tuple[float, float], ...]
    created_ms: int

    def apply_to(self, state: StreamState) -> StreamState:
        check_scale(state, self.sealed, self.new_ranges, self.epoch)
        numbers = range(state.next_number, state.next_number + len(self.new_ranges))
        new_ids = [segment_id(self.epoch, n) for n in numbers]
        segments = dict(state.segments)
        new = {n: (low, high) for n, (low, high) in zip(new_ids, self.new_ranges, strict=True)}
        preds, succs = _links(
            self.sealed, {s: (segments[s].low, segments[s].high) for s in self.sealed}, new
        )
        for new_id, (low, high) in new.items():
            segments[new_id] = SegmentRecord(new_id, low, high, predecessors=preds[new_id])
        for old in self.sealed:
            record = segments[old]
            segments[old] = replace(record, successors=succs[old], sealed_epoch=self.epoch)
        sealed = set(self.sealed)
        still_active = [s for s in state.epochs[-1].segments if s not in sealed]
        epoch = EpochRecord(self.epoch, (*still_active, *new_ids), self.created_ms)
        return replace(
            state,
            segments=segments,
            epochs=(*state.epochs, epoch),
            next_number=state.next_number + len(new_ids),
        )


def _links(
    sealed: Sequence[int],
    old: Mapping[int, tuple[float, float]],
    new: Mapping[int, tuple[float, float]],
) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
    """Predecessors of each ``new`` segment (in ``sealed`` order) and successors of each
    ``old`` one (in ``new`` order): the pairs whose ranges overlap, found by one sweep over
    both sorted lists (each list's ranges are disjoint), O((k + m) log(k + m)) for a scale of
    k segments into m rather than O(k * m)."""
    rank = {s: i for i, s in enumerate(sealed)}
    order = {n: i for i, n in enumerate(new)}
    preds: dict[int, list[int]] = {n: [] for n in new}
    succs: dict[int, list[int]] = {s: [] for s in sealed}
    olds = sorted(old, key=lambda s: old[s])
    news = sorted(new, key=lambda n: new[n])
    i = j = 0
    while i < len(olds) and j < len(news):
        (olow, ohigh), (nlow, nhigh) = old[olds[i]], new[news[j]]
        if olow < nhigh and nlow < ohigh:
            preds[news[j]].append(olds[i])
            succs[olds[i]].append(news[j])
        if ohigh <= nhigh:
            i += 1
        else:
            j += 1
    return (
        {n: tuple(sorted(p, key=rank.__getitem__)) for n, p in preds.items()},
        {s: tuple(sorted(n, key=order.__getitem__)) for s, n in succs.items()},
    )


def check_scale(
    state: StreamState,
    sealed: Sequence[int],
    new_ranges: Sequence[tuple[float, float]],
    epoch: int | None = None,
) -> list[tuple[float, float]]:
    """Validate a scale against ``state``; return the new ranges sorted, else raise."""
    if state.sealed:
        raise StreamSealedError(f"stream {state.scope}/{state.stream} is sealed")
    if epoch is not None and epoch != state.epoch + 1:
        raise ScaleConflictError(
            f"scale for epoch {epoch} but the stream is at epoch {state.epoch}"
        )
    if not sealed or len(set(sealed)) != len(sealed):
        raise ScaleConflictError(f"segments to seal must be distinct and non-empty: {list(sealed)}")
    active = {r.segment_id: r for r in state.active_segments}
    inactive = [s for s in sealed if s not in active]
    if inactive:
        raise ScaleConflictError(
            f"segments {inactive} of {state.scope}/{state.stream} are not active "
            f"(active: {sorted(active)})"
        )
    after = len(active) - len(sealed) + len(new_ranges)
    if after > MAX_SEGMENTS:
        raise InvalidKeyRangesError(
            f"the scale would leave {state.scope}/{state.stream} with {after} active segments; "
            f"the most is {MAX_SEGMENTS}"
        )
    return check_exact_cover(new_ranges, [(active[s].low, active[s].high) for s in sealed])


@dataclass(frozen=True)
class SealStream(Update):
    """Seal every active segment; the stream takes no more writes."""

    sealed_ms: int

    def apply_to(self, state: StreamState) -> StreamState:
        if state.sealed:
            return state
        segments = dict(state.segments)
        for record in state.active_segments:
            segments[record.segment_id] = replace(record, sealed_epoch=state.epoch + 1)
        return replace(state, segments=segments, sealed_ms=self.sealed_ms)


@dataclass(frozen=True)
class TruncateStream(Update):
    """Move the head to ``cut`` (segment -> offset; validated to be at or after the current
    head by the caller); ``before`` lists the segments wholly behind it, whose data is deleted."""

    cut: tuple[tuple[int, int], ...]
    before: tuple[int, ...]

    def apply_to(self, state: StreamState) -> StreamState:
        segments = dict(state.segments)
        for old in self.before:
            segments[old] = replace(segments[old], truncated=True)
        return replace(state, segments=segments, head=dict(self.cut))


@dataclass(frozen=True)
class UpdateStreamConfig(Update):
    config: StreamConfiguration

    def apply_to(self, state: StreamState) -> StreamState:
        return replace(state, config=self.config)


STATE_TYPES: tuple[type, ...] = (
    StreamState,
    SegmentRecord,
    EpochRecord,
    StreamConfiguration,
    ScalingPolicy,
    RetentionPolicy,
)
UPDATE_TYPES: tuple[type[Update], ...] = (
    ScaleStream,
    SealStream,
    TruncateStream,
    UpdateStreamConfig,
)
