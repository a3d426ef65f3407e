"""The figures the examples print are the real ones."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.cli import ROOT


def test_multiprocess_consumer_prints_real_figures_with_duplicates_named(redis_url: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "examples/multiprocess_consumer.py",
            "--consumers",
            "2",
            "--events",
            "300",
        ],
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = re.search(
        r"(\d+) of 300 distinct jobs handled by (\d+) of 2 processes \(per process: ([\d, ]+)\)",
        done.stdout,
    )
    assert figures, done.stdout
    distinct, processes = int(figures[1]), int(figures[2])
    per_process = [int(n) for n in figures[3].split(", ")]
    assert distinct == 300 and processes == len(per_process) <= 2
    reported = re.findall(r"^c\d: handled (\d+)", done.stdout, re.MULTILINE)
    assert sum(map(int, reported)) == sum(per_process), "the log and the runners disagree"
    duplicates = sum(per_process) - distinct
    assert (f"{duplicates} duplicates" if duplicates else "no duplicates") in done.stdout
