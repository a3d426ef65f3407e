"""Forced failovers of real replicated servers started by the test, under a writer and a reader
group (issue 18): a primary/replica pair with 3 Sentinels here, a 3x2 Cluster in
``test_ha_cluster.py``. Judged by :mod:`tools.ha_run`: nothing acknowledged-and-present skipped,
no (segment, offset) naming two events, no segment handed out by two live readers at once, no
reader removed (the application never has to rejoin one), readers back within the session
timeout plus the failover time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from readergroup import ClientConfig
from readergroup.core.errors import EmbeddedRedisError
from readergroup.testing.embedded_redis import LocalSentinelGroup, local_sentinel_group
from tools.ha_run import HaFigures, HaRun

ROOT = Path(__file__).resolve().parent.parent

SESSION = 3.0
"""Shorter than a Sentinel failover lasts for clients (the old primary keeps taking writes
until the Sentinels turn it into a replica, several seconds after the promotion)."""


def sentinel_group(replicas: int) -> Iterator[LocalSentinelGroup]:
    try:
        with local_sentinel_group(replicas=replicas, sentinels=3) as group:
            yield group
    except EmbeddedRedisError as exc:
        pytest.fail(f"a local Sentinel group is required: {exc}", pytrace=False)


@pytest.fixture
def sentinels() -> Iterator[LocalSentinelGroup]:
    yield from sentinel_group(replicas=1)


@pytest.fixture
def two_replica_sentinels() -> Iterator[LocalSentinelGroup]:
    yield from sentinel_group(replicas=2)


def assert_nothing_skipped(figures: HaFigures) -> None:
    assert figures.skipped == 0, figures
    assert figures.divergences == 0, figures
    assert figures.overlaps == 0, figures
    assert figures.order_violations == 0, figures
    assert figures.removals == 0, figures.removal_reasons


@pytest.mark.redis
@pytest.mark.long  # about 24 s: a group through a forced failover (make test-long; CI runs both)
def test_a_reader_group_rides_out_a_sentinel_failover(sentinels: LocalSentinelGroup) -> None:
    run = HaRun(
        sentinels.url,
        readers=3,
        segments=4,
        client=ClientConfig(acks="replicas=1", ack_timeout=1.0),
        group={"session_timeout": SESSION},
    )
    run.start()
    began = time.monotonic()
    with run.failover():
        sentinels.failover()
        sentinels.wait_replicating()  # the old primary is a replica of the new one
    failover_seconds = time.monotonic() - began
    comeback = run.wait_comeback(SESSION + failover_seconds + 30)
    figures = run.finish()
    assert_nothing_skipped(figures)
    assert figures.lost == 0 and figures.write_failures == 0, figures  # acks=replicas=1
    assert figures.acknowledged > 0 and comeback <= SESSION + failover_seconds + 30


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.redis
def test_a_reader_group_rides_out_a_killed_sentinel_primary(
    two_replica_sentinels: LocalSentinelGroup,
) -> None:
    sentinels = two_replica_sentinels
    run = HaRun(
        sentinels.url,
        readers=3,
        segments=4,
        client=ClientConfig(acks="replicas=1", ack_timeout=1.0),
        group={"session_timeout": SESSION},
    )
    run.start()
    victim = sentinels.primary
    began = time.monotonic()
    with run.failover():
        victim.kill()  # the other replica follows the promoted one: replicas=1 is met again
        sentinels.failover(dead=victim.port)
    failover_seconds = time.monotonic() - began
    comeback = run.wait_comeback(SESSION + failover_seconds + 60)
    figures = run.finish()
    assert_nothing_skipped(figures)
    assert figures.lost == 0 and figures.write_failures == 0, figures
    assert figures.acknowledged > 0 and comeback <= SESSION + failover_seconds + 60


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.redis
def test_a_short_chaos_ha_run_with_replicas_1_loses_and_skips_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.chaos", "ha", "--seconds", "20", "--acks", "replicas=1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    figures = json.loads(done.stdout[done.stdout.index("{") :])
    assert figures["failovers"] == 2 and figures["acknowledged"] > 100
    assert figures["lost"] == 0 and figures["skipped"] == 0 and figures["divergences"] == 0
    assert figures["silent_divergences"] == 0 and figures["overlaps"] == 0
    assert figures["removals"] == 0
    assert done.returncode == 0, done.stderr[-2000:]
