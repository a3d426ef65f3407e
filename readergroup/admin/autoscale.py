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

:meth:`AutoScaler.run` is the long-lived loop (``readergroup stream autoscale SCOPE/STREAM``
runs it): a round every :attr:`AutoScaleSchedule.interval` seconds, each decision logged at
INFO, failures at WARNING with the exception and retried after a capped, jittered backoff, at
most :attr:`AutoScaleSchedule.max_failures` in a row; it returns when its stop event is set
(or the stream is sealed) with what it did (:class:`AutoScaleRun`).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from readergroup.admin.stream_manager import StreamManager
from readergroup.core.errors import InvalidConfigError, ReaderGroupError, ScaleConflictError
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


@dataclass(frozen=True, kw_only=True, slots=True)
class AutoScaleSchedule:
    """How :meth:`AutoScaler.run` paces itself.

    Attributes:
        interval: seconds between rounds (rates are measured over this window; 0.01..3600).
        max_backoff: longest wait after a failed round, seconds (>= ``interval``); the wait
            after ``n`` failures in a row is up to ``interval * 2**(n-1)``, capped here, with
            jitter (half to all of it).
        max_failures: failed rounds in a row after which ``run`` gives up and raises the last
            error (1..100000): every retry loop is bounded.
    """

    interval: float = 10.0
    max_backoff: float = 60.0
    max_failures: int = 30

    def __post_init__(self) -> None:
        if not 0.01 <= self.interval <= 3600:
            raise InvalidConfigError(f"interval must be 0.01..3600 s: {self.interval}")
        if not self.max_backoff >= self.interval:
            raise InvalidConfigError(
                f"max_backoff ({self.max_backoff}) must be at least interval ({self.interval})"
            )
        if not 1 <= self.max_failures <= 100_000:
            raise InvalidConfigError(f"max_failures must be 1..100000: {self.max_failures}")

    def backoff(self, failures: int, jitter: random.Random) -> float:
        """Seconds to wait after ``failures`` (>= 1) failed rounds in a row."""
        cap = min(self.max_backoff, self.interval * 2.0 ** min(failures - 1, 30))
        return cap * jitter.uniform(0.5, 1.0)


@dataclass(slots=True)
class AutoScaleRun:
    """What one :meth:`AutoScaler.run` did: rounds run, scale actions applied, failed rounds,
    why it ended (``"stopped"``: its stop event; ``"sealed"``: the stream was sealed), and the
    active segments its last round saw."""

    rounds: int = 0
    actions: list[ScaleAction] = field(default_factory=list)
    failures: int = 0
    ended: str = ""

    @property
    def summary(self) -> str:
        """One line: why it stopped, rounds, scales, failed rounds, active segments."""
        why = "the stream is sealed" if self.ended == "sealed" else "asked to stop"
        kinds = ", ".join(a.kind for a in self.actions) or "none"
        return (
            f"stopped after {self.rounds} rounds ({why}): {len(self.actions)} scales ({kinds}), "
            f"{self.failures} failed rounds; active segments {self.active_segments}"
        )

    active_segments: list[int] = field(default_factory=list)


class AutoScaler:
    """Measures per-segment event rates between calls and applies :func:`plan_scaling`.

    Run ``run_once()`` periodically from any process, or :meth:`run` as a service loop (one
    at a time per stream is enough; two concurrent ones are safe: the loser's scale fails with
    ScaleConflictError and is ignored). Rates are measured on Redis server time (``now_ms`` is
    injectable).
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
        self._sealed = False
        self._active: list[int] = []

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
        self._sealed = state.sealed
        self._active = sorted(r.segment_id for r in state.active_segments)
        if not rates or state.sealed:
            return None
        segments = [(r.segment_id, r.low, r.high) for r in state.active_segments]
        action = plan_scaling(state.config.scaling_policy, segments, rates)
        if action is None:
            return None
        try:
            created = self._manager.scale_stream(
                self._scope, self._stream, action.sealed, action.new_ranges
            )
        except ScaleConflictError as exc:
            logger.info(
                "autoscale of %s/%s: %s; deciding again next round", self._scope, self._stream, exc
            )
            return None
        logger.info(
            "autoscale of %s/%s: %s of segments %s at %s events/s (target %s) into %s",
            self._scope,
            self._stream,
            action.kind,
            list(action.sealed),
            [round(rates.get(s, 0.0), 1) for s in action.sealed],
            state.config.scaling_policy.target_rate,
            created,
        )
        self._samples = {}
        self._active = sorted({*self._active, *created} - set(action.sealed))
        return action

    def run(
        self,
        stop: threading.Event,
        schedule: AutoScaleSchedule | None = None,
        *,
        wait: Callable[[float], bool] | None = None,
        jitter: random.Random | None = None,
    ) -> AutoScaleRun:
        """Run rounds of :meth:`run_once` until ``stop`` is set (or the stream is sealed).

        Between rounds it waits ``schedule.interval`` seconds with ``wait(seconds)``, which
        returns ``True`` to stop (default: ``stop.wait``, so setting ``stop`` ends the wait at
        once). A round that fails with a retriable error (Redis unreachable, say) is logged at
        WARNING with the exception and retried after :meth:`AutoScaleSchedule.backoff`; after
        ``max_failures`` failed rounds in a row, or on an error that waiting cannot fix (the
        stream deleted, access denied), the error is raised. Returns what it did; its last
        state is logged at INFO.
        """
        schedule = schedule or AutoScaleSchedule()
        wait = wait or stop.wait
        jitter = jitter or random.Random()  # noqa: S311 (backoff jitter, not security)
        name = f"{self._scope}/{self._stream}"
        done = AutoScaleRun()
        failures = 0
        logger.info("autoscaler of %s started: a round every %s s", name, schedule.interval)
        while not stop.is_set():
            try:
                action = self.run_once()
            except ReaderGroupError as exc:
                if not exc.retriable:
                    raise
                failures += 1
                done.failures += 1
                if failures >= schedule.max_failures:
                    logger.warning(
                        "autoscaler of %s gives up after %d failed rounds in a row",
                        name,
                        failures,
                        exc_info=True,
                    )
                    raise
                delay = schedule.backoff(failures, jitter)
                logger.warning(
                    "autoscaler of %s: round failed (%d in a row), retrying in %.2f s: %s",
                    name,
                    failures,
                    delay,
                    exc,
                    exc_info=True,
                )
                if wait(delay):
                    break
                continue
            failures = 0
            done.rounds += 1
            if action is not None:
                done.actions.append(action)
            if self._sealed:
                done.ended = "sealed"
                break
            if wait(schedule.interval):
                break
        done.ended = done.ended or "stopped"
        done.active_segments = list(self._active)
        logger.info("autoscaler of %s %s", name, done.summary)
        return done
