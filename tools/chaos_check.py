"""The chaos run's history checker. Pure: it reads the logs, never Redis.

Inputs: the events the writer had *acknowledged* (``key:seq``), and every delivery a reader
recorded as ``(reader, token, segment, offset, event, wall time)``. Figures:

* ``lost``: acknowledged events never delivered (must be 0);
* ``order_violations``: within one ownership (reader, fencing token), a key's sequence numbers
  not strictly increasing (must be 0);
* ``duplicates``: deliveries beyond the first of an event (allowed only after a failover: a
  reader died or lost its segment before committing; ``max_duplicates_per_ownership`` bounds
  them by what one commit interval can hold);
* ``overlaps``: two ownerships of one segment whose deliveries interleave in time, i.e. two
  live readers handing out the same segment at once (must be 0);
* ``writes_failed_early``: writer futures that failed although their ``delivery_timeout`` had
  not passed (or never resolved: age ``-1``), from each failed future's age in seconds
  (must be 0: outages within the timeout are ridden out).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Delivery:
    reader: str
    token: int
    segment: int
    offset: int
    event: str
    at: float


@dataclass
class Report:
    acknowledged: int
    delivered: int
    distinct: int
    lost: int
    duplicates: int
    order_violations: int
    overlaps: int
    ownerships: int
    max_duplicates_per_ownership: int
    writes_failed: int = 0
    writes_failed_early: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.order_violations == 0
            and self.overlaps == 0
            and self.writes_failed_early == 0
        )


def check(
    acknowledged: Iterable[str],
    deliveries: list[Delivery],
    write_failure_ages: Iterable[float] = (),
    delivery_timeout: float = 120.0,
) -> Report:
    acked = set(acknowledged)
    ages = list(write_failure_ages)
    counts = Counter(d.event for d in deliveries)
    runs: dict[tuple[str, int], list[Delivery]] = defaultdict(list)
    for d in sorted(deliveries, key=lambda d: (d.reader, d.token, d.at)):
        runs[(d.reader, d.token)].append(d)
    violations = 0
    for run in runs.values():
        last: dict[str, int] = {}
        for d in run:
            key, seq = d.event.rsplit(":", 1)
            if key in last and int(seq) <= last[key]:
                violations += 1
            last[key] = int(seq)
    spans: dict[int, list[tuple[float, float, tuple[str, int]]]] = defaultdict(list)
    for owner, run in runs.items():
        for segment in {d.segment for d in run}:
            times = [d.at for d in run if d.segment == segment]
            spans[segment].append((min(times), max(times), owner))
    overlaps = 0
    for intervals in spans.values():
        intervals.sort()
        latest_end, latest_owner = float("-inf"), None
        for start, end, owner in intervals:
            if owner != latest_owner and start < latest_end:
                overlaps += 1  # this ownership began before an earlier one's last delivery
            if end > latest_end:
                latest_end, latest_owner = end, owner
    first_seen: dict[str, tuple[str, int]] = {}
    dup_by_owner: Counter[tuple[str, int]] = Counter()
    for d in sorted(deliveries, key=lambda d: d.at):
        if d.event in first_seen:
            dup_by_owner[(d.reader, d.token)] += 1
        else:
            first_seen[d.event] = (d.reader, d.token)
    return Report(
        acknowledged=len(acked),
        delivered=len(deliveries),
        distinct=len(counts),
        lost=len(acked - set(counts)),
        duplicates=len(deliveries) - len(counts),
        order_violations=violations,
        overlaps=overlaps,
        ownerships=len(runs),
        max_duplicates_per_ownership=max(dup_by_owner.values(), default=0),
        writes_failed=len(ages),
        writes_failed_early=sum(1 for age in ages if age < delivery_timeout),
    )
