"""A shortened chaos run (``make chaos`` is the full one) and the checker's own rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.chaos_check import Delivery, check

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.redis
def test_a_short_chaos_run_loses_nothing_and_never_overlaps() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.chaos",
            "--seconds",
            "12",
            "--readers",
            "4",
            "--segments",
            "8",
            "--kill-every",
            "1.5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    figures = json.loads(done.stdout[done.stdout.index("{") :])
    assert figures["lost"] == 0 and figures["order_violations"] == 0 and figures["overlaps"] == 0
    assert figures["writes_failed_early"] == 0  # also the writer whose metadata had expired
    assert figures["kills"] >= 5 and figures["redis_restarts"] == 1 and figures["scales"] == 2
    assert figures["acknowledged"] > 1000
    assert figures["asyncio_reader_deliveries"] > 0  # a mixed group: r1 and r3 are asyncio
    assert done.returncode == 0, done.stderr[-2000:]


def d(reader: str, token: int, segment: int, event: str, at: float) -> Delivery:
    return Delivery(reader, token, segment, 0, event, at)


def test_the_checker_catches_each_kind_of_failure() -> None:
    clean = check(["k:1", "k:2"], [d("a", 1, 0, "k:1", 1.0), d("a", 1, 0, "k:2", 2.0)])
    assert clean.ok and clean.duplicates == 0
    lost = check(["k:1", "k:2"], [d("a", 1, 0, "k:1", 1.0)])
    assert lost.lost == 1 and not lost.ok
    reordered = check(["k:1", "k:2"], [d("a", 1, 0, "k:2", 1.0), d("a", 1, 0, "k:1", 2.0)])
    assert reordered.order_violations == 1 and not reordered.ok
    overlapping = check(
        ["k:1", "k:2", "k:3"],
        [d("a", 1, 0, "k:1", 1.0), d("b", 2, 0, "k:2", 1.5), d("a", 1, 0, "k:3", 2.0)],
    )
    assert overlapping.overlaps == 1 and not overlapping.ok
    failover = check(
        ["k:1", "k:2"],
        [d("a", 1, 0, "k:1", 1.0), d("b", 2, 0, "k:1", 3.0), d("b", 2, 0, "k:2", 4.0)],
    )
    assert failover.ok and failover.duplicates == 1 and failover.max_duplicates_per_ownership == 1
    nested = check(  # a long ownership overlapping one that is not its neighbour in start order
        ["k:1", "k:2", "k:3", "k:4"],
        [
            d("a", 1, 0, "k:1", 1.0),
            d("b", 2, 0, "k:2", 2.0),
            d("b", 2, 0, "k:3", 2.5),
            d("c", 3, 0, "k:4", 3.0),
            d("a", 1, 0, "k:1", 9.0),
        ],
    )
    assert nested.overlaps == 2


def test_the_checker_counts_writes_failed_before_their_delivery_timeout() -> None:
    report = check(["k:1"], [d("a", 1, 0, "k:1", 1.0)], [0.4, 130.0, -1.0], 120.0)
    assert report.writes_failed == 3 and report.writes_failed_early == 2 and not report.ok
    assert check(["k:1"], [d("a", 1, 0, "k:1", 1.0)], [121.0], 120.0).ok
