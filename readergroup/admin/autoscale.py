"""Automatic scaling by event rate: a pure decision function and a runner any process may run.

:func:`plan_scaling` decides, from the active segments and their measured rates, at most one
action per call:

* **split** the busiest segment whose rate exceeds ``target_rate`` into ``scale_factor``
  equal ranges, unless that would pass the segment cap (``MAX_SEGMENTS``);
* otherwise **merge** the quietest pair of neighbouring segments whose rates are both below
  ``target_rate / 2`` (the gap between the two thresholds is the hysteresis that keeps a
  stream from flapping), if that keeps at least ``min_segments`` segments.

>>> policy = ScalingPolicy.by_event_rate(target_rate=100, scale_factor=2, min_segments=1)
>>> plan_scaling(policy, [(1, 0.0, 0.5), (2, 0.5, 1.0)], {1: 250.0, 2: 10.0})
ScaleAction(kind='split', sealed=(1,), new_ranges=((0.0, 0.25), (0.25, 0.5)))
>>> plan_scaling(policy, [(1, 0.0, 0.5), (2, 0.5, 1.0)], {1: 20.0, 2: 10.0})
ScaleAction(kind='merge', sealed=(1, 2), new_ranges=((0.0, 1.0),))
>>> plan_scaling(policy, [(1, 0.0, 0.5), (2, 0.5, 1.0)], {1: 70.0, 2: 10.0}) is None
True
>>> full = [(n, n / MAX_SEGMENTS, (n + 1) / MAX_SEGMENTS) for n in range(MAX_SEGMENTS)]
>>> plan_scaling(policy, full, {0: 250.0}).kind  # at the cap: no split, quiet ones merge
'merge'
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from readergroup.admin.stream_manager import StreamManager
from readergroup.core.errors import ScaleConflictError
from readergroup.core.routing import uniform_ranges
from readergroup.core.stream_config import MAX_SEGMENTS, ScalingPolicy

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScaleAction:
    kind: str
    sealed: tuple[int, ...]
    new_ranges: tuple[tuple[float, float], ...]


def plan_scaling(
    policy: ScalingPolicy,
    segments: Sequence[tuple[int, float, float]],
    rates: Mapping[int, float],
) -> ScaleAction | None:
    """At most one split or merge for ``segments`` (id, low, high) at ``rates`` (events/s)."""
    if policy.kind != "by_event_rate" or not segments:
        return None
    ordered = sorted(segments, key=lambda s: s[1])
    hot = [s for s in ordered if rates.get(s[0], 0.0) > policy.target_rate]
    if hot and len(ordered) - 1 + policy.scale_factor <= MAX_SEGMENTS:  # no split past the cap
        seg, low, high = max(hot, key=lambda s: rates.get(s[0], 0.0))
        return ScaleAction("split", (seg,), tuple(uniform_ranges(policy.scale_factor, low, high)))
    if len(ordered) <= policy.min_segments:
        return None
    quiet = policy.target_rate / 2
    pairs = [
        (a, b)
        for a, b in pairwise(ordered)
        if rates.get(a[0], 0.0) < quiet and rates.get(b[0], 0.0) < quiet
    ]
    if not pairs:
        return None
    a, b = min(pairs, key=lambda p: rates.get(p[0][0], 0.0) + rates.get(p[1][0], 0.0))
    return ScaleAction("merge", (a[0], b[0]), ((a[1], b[2]),))


class AutoScaler:
    """Measures per-segment event rates between calls and applies :func:`plan_scaling`.

    Run ``run_once()`` periodically from any process (one at a time per stream is enough;
    two concurrent ones are safe: the loser's scale fails with ScaleConflictError and is
    ignored). Rates are measured on Redis server time (``now_ms`` is injectable).
    """

    def __init__(
        self,
        manager: StreamManager,
        scope: str,
        stream: str,
        *,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self._manager = manager
        self._scope = scope
        self._stream = stream
        self._now_ms = now_ms or manager.connection.server_time_ms
        self._samples: dict[int, tuple[int, int]] = {}

    def measure(self) -> dict[int, float]:
        """Events/s per active segment since the previous call (first call: empty)."""
        state = self._manager.stream_state(self._scope, self._stream)
        active = [r.segment_id for r in state.active_segments]
        now = self._now_ms()
        tails = self._manager.segment_states(self._scope, self._stream, active)
        rates: dict[int, float] = {}
        for segment in active:
            previous = self._samples.get(segment)
            if previous is not None and now > previous[1]:
                rates[segment] = (tails[segment].tail - previous[0]) * 1000.0 / (now - previous[1])
        self._samples = {s: (tails[s].tail, now) for s in active}
        return rates

    def run_once(self) -> ScaleAction | None:
        """Measure, decide, and apply at most one action; return it (``None``: nothing)."""
        rates = self.measure()
        state = self._manager.stream_state(self._scope, self._stream)
        if not rates or state.sealed:
            return None
        segments = [(r.segment_id, r.low, r.high) for r in state.active_segments]
        action = plan_scaling(state.config.scaling_policy, segments, rates)
        if action is None:
            return None
        try:
            self._manager.scale_stream(self._scope, self._stream, action.sealed, action.new_ranges)
        except ScaleConflictError as exc:
            logger.info(
                "autoscale of %s/%s: %s; deciding again next round", self._scope, self._stream, exc
            )
            return None
        self._samples = {}
        return action
