"""Retention: truncate a stream's old data, never past what a subscriber still needs.

A stream's :class:`RetentionPolicy` (in its :class:`~readergroup.StreamConfiguration`) says
which data is *eligible* for deletion: with ``max_age_ms`` data appended longer ago than that,
with ``max_bytes`` data beyond that many bytes from the tail, with neither all of it. When
``consumption_based`` is true (the default) eligible data is deleted only once every
*subscriber* has passed it:

* every reader group reading the stream whose ``retention_subscriber`` is ``"committed"`` (its
  committed positions) or ``"checkpoint"`` (its last completed checkpoint; nothing is deleted
  for a group that has none yet). Groups read streams of their own scope only and are found
  in that scope's catalog, so retention of a scope reads only keys its own roles can write;
* every external subscriber that published a cut with :meth:`RetentionManager.publish` (the
  Spark source does, on each committed micro-batch).

The truncation point is the *meet* of those cuts: at every point of the key space the earliest
position any of them still needs. :meth:`RetentionManager.apply` computes it and truncates;
run it periodically from any process (it is idempotent and never moves the head backwards).

The decisions are :class:`RetentionSteps`' procedures (see :mod:`readergroup.core.calls`), run
blocking by :class:`RetentionManager` and awaited by
:class:`~readergroup.aio.retention.AsyncRetentionManager`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from readergroup.admin.group_positions import cuts_by_stream
from readergroup.admin.stream_manager import StreamManager
from readergroup.admin.stream_steps import StreamSteps, fetch_state_steps
from readergroup.core import catalog
from readergroup.core.calls import Steps, call_on, drive
from readergroup.core.errors import (
    InvalidStreamCutError,
    ReaderGroupError,
    SubscribedGroupGoneError,
)
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES, GroupState
from readergroup.core.names import group_sync_name
from readergroup.core.planning import descendants, plan_ranges
from readergroup.core.stream_config import RetentionPolicy
from readergroup.core.stream_cut import StreamCut, check_cut_covers
from readergroup.core.stream_metadata import StreamState

logger = logging.getLogger(__name__)


def meet(state: StreamState, cuts: Sequence[Mapping[int, int]]) -> dict[int, int]:
    """The earliest of several cuts at every point of the key space.

    A segment that has an ancestor in any cut is replaced by that ancestor (earlier data); for
    a segment in several cuts the lowest offset wins.

    >>> from readergroup.core.stream_config import StreamConfiguration, ScalingPolicy
    >>> from readergroup.core.stream_metadata import initial_state, ScaleStream
    >>> s = initial_state("a", "b", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)), 0)
    >>> s = ScaleStream(1, (0,), ((0.0, 0.25), (0.25, 0.5)), 0).apply_to(s)
    >>> meet(s, [{0: 7, 1: 3}, {4294967298: 2, 4294967299: 5, 1: 9}])
    {0: 7, 1: 3}
    """
    merged: dict[int, int] = {}
    for cut in cuts:
        for segment, offset in cut.items():
            merged[segment] = min(offset, merged.get(segment, offset))
    later = descendants(state, set(merged))  # segments some cut is still before
    return {s: o for s, o in sorted(merged.items()) if s not in later}


class RetentionSteps:
    """Retention of streams on ``streams``' connection (threaded or asyncio), as procedures."""

    def __init__(self, streams: StreamSteps) -> None:
        self._streams = streams
        self._connection = streams.connection

    def publish(self, scope: str, stream: str, subscriber: str, cut: StreamCut) -> Steps[None]:
        """Record ``subscriber``'s position so retention keeps what it has not passed."""
        if (cut.scope, cut.stream) != (scope, stream):
            raise InvalidStreamCutError(f"cut is for {cut.scoped_stream}, not {scope}/{stream}")
        yield call_on(self._connection.subscribers, "publish", scope, stream, subscriber, str(cut))

    def unsubscribe(self, scope: str, stream: str, subscriber: str) -> Steps[None]:
        yield call_on(self._connection.subscribers, "unsubscribe", scope, stream, subscriber)

    def subscriber_cuts(self, scope: str, stream: str) -> Steps[dict[str, StreamCut | None]]:
        """Every subscriber's cut (``None``: a subscriber that needs everything for now, such as
        a checkpoint-mode group without a checkpoint, or a group whose state cannot be read)."""
        scoped = f"{scope}/{stream}"
        cuts: dict[str, StreamCut | None] = {}
        # only this scope's keys: its catalog and its groups (a group reads its own scope only)
        scope_catalog = yield from self._streams.catalog(scope)
        for group in catalog.subscribers_of(scope_catalog, stream):
            try:
                subscribes, cut = yield from self._group_cut(scope, group, scoped)
            except ReaderGroupError as exc:
                subscribes, cut = True, None  # unreadable: never delete what it may need
                logger.warning(
                    "retention of %s: group %s/%s unreadable, so nothing it may need is "
                    "deleted: %s",
                    scoped,
                    scope,
                    group,
                    exc,
                    exc_info=exc,
                )
            if subscribes:
                cuts[f"group:{scope}/{group}"] = cut
        published = yield call_on(self._connection.subscribers, "published", scope, stream)
        for name, text in published.items():
            cuts[f"external:{name}"] = StreamCut.from_text(text)
        return cuts

    def _group_cut(
        self, scope: str, group: str, scoped: str
    ) -> Steps[tuple[bool, StreamCut | None]]:
        """Whether a group subscribes to ``scoped``, and its cut (``None``: needs everything)."""
        sync = self._connection.synchronizer(
            group_sync_name(scope, group), UPDATE_TYPES, STATE_TYPES
        )
        try:
            state: GroupState = yield from fetch_state_steps(
                sync, SubscribedGroupGoneError, "read group"
            )
        except SubscribedGroupGoneError:
            return False, None  # deleted meanwhile: no longer a subscriber
        config = state.config
        if config.retention_subscriber == "none":
            return False, None
        streams = {f"{s}/{t}" for s, t in config.scoped_streams(scope)}
        if scoped not in streams:
            return False, None
        if config.retention_subscriber == "checkpoint":
            done = [c for c in state.checkpoints if c.completed_ms >= 0]
            if not done:
                return True, None
            return True, cuts_by_stream(done[-1].positions).get(scoped)
        return True, cuts_by_stream(state.positions()).get(scoped)

    def truncation_cut(self, scope: str, stream: str) -> Steps[StreamCut | None]:
        """Where :meth:`apply` would truncate now (``None``: nothing to delete)."""
        state = yield from self._streams.stream_state(scope, stream)
        policy = state.config.retention
        if policy is None:
            return None
        candidates: list[Mapping[int, int]] = [(yield from self._limit_cut(state, policy))]
        if policy.consumption_based:
            for name, cut in (yield from self.subscriber_cuts(scope, stream)).items():
                if cut is None:
                    return None
                unknown = sorted(set(cut.positions) - set(state.segments))
                if unknown:  # e.g. published for an older stream of this name
                    logger.warning(
                        "retention of %s/%s: subscriber %s's cut names segments %s the stream "
                        "does not have; nothing is deleted until it publishes a cut of this "
                        "stream (or unsubscribes)",
                        scope,
                        stream,
                        name,
                        unknown,
                    )
                    return None
                candidates.append(dict(cut.positions))
        point = meet(state, candidates)
        if meet(state, [point, state.head]) == point:
            return None  # not past the head anywhere: nothing to delete
        ranges = {s: (r.low, r.high) for s, r in state.segments.items() if not r.truncated}
        cut = StreamCut(scope, stream, point)
        check_cut_covers(cut, ranges)
        return cut

    def _limit_cut(self, state: StreamState, policy: RetentionPolicy) -> Steps[dict[int, int]]:
        """The cut the age and size limits allow (the tail when there is no limit)."""
        scope, stream = state.scope, state.stream
        tail = yield from self._streams.tail_cut(scope, stream)
        limits: list[Mapping[int, int]] = []
        if policy.max_age_ms is not None:
            now = yield from self._streams.server_time_ms()
            cut = yield from self._streams.cut_at_time(scope, stream, now - policy.max_age_ms)
            limits.append(dict(cut.positions))
        if policy.max_bytes is not None:
            limits.append(
                (yield from self._size_cut(state, policy.max_bytes, dict(tail.positions)))
            )
        if not limits:
            return dict(tail.positions)
        # a limit makes data *eligible*; when both are set, data must be beyond both
        return meet(state, limits)

    def _size_cut(
        self, state: StreamState, max_bytes: int, tail: dict[int, int]
    ) -> Steps[dict[int, int]]:
        """The latest time cut after which at most ``max_bytes`` remain (binary search)."""
        scope, stream = state.scope, state.stream
        low = state.created_ms
        high = yield from self._streams.server_time_ms()
        best = dict(state.head)
        while high - low > 1:
            middle = (low + high) // 2
            cut = dict((yield from self._streams.cut_at_time(scope, stream, middle)).positions)
            if (yield from self._bytes_after(state, cut)) <= max_bytes:
                best, high = cut, middle
            else:
                low = middle
        return best if (yield from self._bytes_after(state, best)) <= max_bytes else dict(tail)

    def _bytes_after(self, state: StreamState, cut: dict[int, int]) -> Steps[int]:
        """Bytes stored at and after ``cut`` (one round trip)."""
        ranges = plan_ranges(state, cut, None, dict.fromkeys(state.segments, 1 << 62))
        starts = {r.segment: r.start for r in ranges}
        probe = yield call_on(
            self._connection.segments, "lag_probe", state.scope, state.stream, starts
        )
        return sum(size - byte_at for _, size, byte_at, _ in probe.values())

    def apply(self, scope: str, stream: str) -> Steps[StreamCut | None]:
        """Truncate ``scope/stream`` as far as its policy and subscribers allow; return the cut
        truncated at (``None``: nothing was deleted)."""
        cut = yield from self.truncation_cut(scope, stream)
        if cut is None:
            return None
        try:
            yield from self._streams.truncate_stream(scope, stream, cut)
        except InvalidStreamCutError:
            return None  # behind the head already: nothing new to delete
        return cut


class RetentionManager:
    """Computes and applies retention for streams (any process may run it). Each method runs
    :class:`RetentionSteps`' procedure of the same name, blocking."""

    def __init__(self, manager: StreamManager) -> None:
        self._manager = manager
        self.steps = RetentionSteps(manager.steps)

    def publish(self, scope: str, stream: str, subscriber: str, cut: StreamCut) -> None:
        """Record ``subscriber``'s position so retention keeps what it has not passed."""
        drive(self.steps.publish(scope, stream, subscriber, cut))

    def unsubscribe(self, scope: str, stream: str, subscriber: str) -> None:
        drive(self.steps.unsubscribe(scope, stream, subscriber))

    def subscriber_cuts(self, scope: str, stream: str) -> dict[str, StreamCut | None]:
        """Every subscriber's cut (``None``: a subscriber that needs everything for now, such as
        a checkpoint-mode group without a checkpoint, or a group whose state cannot be read)."""
        return drive(self.steps.subscriber_cuts(scope, stream))

    def truncation_cut(self, scope: str, stream: str) -> StreamCut | None:
        """Where :meth:`apply` would truncate now (``None``: nothing to delete)."""
        return drive(self.steps.truncation_cut(scope, stream))

    def apply(self, scope: str, stream: str) -> StreamCut | None:
        """Truncate ``scope/stream`` as far as its policy and subscribers allow; return the cut
        truncated at (``None``: nothing was deleted)."""
        return drive(self.steps.apply(scope, stream))
