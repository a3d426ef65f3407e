"""Run the ``readergroup`` CLI as a real subprocess (the way an operator runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def cli(
    redis_url: str, *args: str, ok: bool = True, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``readergroup ARGS`` with REDIS_URL set; by default it must exit 0."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "-m", "readergroup.cli", *args],
        env={**env, "REDIS_URL": redis_url},
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    if ok:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def as_json(redis_url: str, *args: str) -> Any:
    return json.loads(cli(redis_url, *args, "--json").stdout)


def refused(redis_url: str, *args: str, code: int = 1) -> str:
    """Run a command that must fail cleanly: exit ``code``, one line on stderr, no traceback.
    Returns that line."""
    done = cli(redis_url, *args, ok=False)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


def setup_group(redis_url: str, scope: str, events: int = 30, start: str = "tail") -> str:
    """``SCOPE/orders`` (2 segments, ``events`` written) read by group ``SCOPE/billing``."""
    cli(redis_url, "stream", "create", f"{scope}/orders", "--segments", "2")
    cli(redis_url, "stream", "write", f"{scope}/orders", "--count", str(events))
    cli(
        redis_url,
        "group",
        "create",
        f"{scope}/billing",
        "--stream",
        f"{scope}/orders",
        "--start",
        start,
    )
    return f"{scope}/billing"
