"""Every example runs, in short mode, against the test Redis and reports success."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.long


def run_example(script: str, redis_url: str, *args: str) -> str:
    env = {**os.environ, "REDIS_URL": redis_url}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_statesync_counter_example(redis_url: str) -> None:
    out = run_example("statesync_counter.py", redis_url, "--workers", "3", "--updates", "40")
    assert "total=120 expected=120" in out and "VERIFIED" in out


def test_exactly_once_example(redis_url: str) -> None:
    out = run_example("exactly_once.py", redis_url, "--events", "900")
    assert "exact=True" in out and "VERIFIED" in out


def test_spark_pipeline_example(redis_url: str) -> None:
    out = run_example("spark_pipeline.py", redis_url, "--events", "1500")
    assert "exact=True" in out and "VERIFIED" in out


def test_the_demo_main_job_in_short_mode(redis_url: str) -> None:
    """Piped (as ``make demo | tee``), under a narrow terminal's COLUMNS: nothing is cut, and
    it ends without a warning (issue 32 item 6)."""
    done = subprocess.run(
        [sys.executable, "-m", "readergroup.demo", "--seconds", "6"],
        env={**os.environ, "REDIS_URL": redis_url, "COLUMNS": "60"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "VERIFIED" in done.stdout and "keys out of order within an ownership" in done.stdout
    assert "…" not in done.stdout and "heartbeat age s" in done.stdout, done.stdout
    assert any(line.startswith("verified summary") for line in done.stdout.splitlines())
    assert "unsealed" not in done.stderr and "WARNING" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        ("quickstart.py", [], "customer-7"),
        ("multiprocess_consumer.py", ["--consumers", "2", "--events", "600"], "VERIFIED"),
        ("spark_batch.py", [], "VERIFIED"),
        ("cli_tour.py", [], "VERIFIED"),
        ("exactly_once_sqlite.py", ["--events", "3000"], "EXACTLY ONCE"),
    ],
)
def test_every_example_runs(redis_url: str, script: str, args: list[str], expect: str) -> None:
    assert expect in run_example(script, redis_url, *args)


def test_aio_consumer_example(redis_url: str) -> None:
    """``async for`` workers of one group in one loop, one cancelled, one joining late."""
    out = run_example("aio_consumer.py", redis_url, "--events", "1500")
    assert "VERIFIED" in out, out
