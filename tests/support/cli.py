"""Run the ``readergroup`` CLI as a real subprocess (the way an operator runs it)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

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


def invoke(redis_url: str, *args: str, columns: int | None = None) -> str:
    """``readergroup ARGS`` in this process (click's runner: quicker than a subprocess; output
    not a terminal, as when piped), ``COLUMNS`` set as a narrow terminal would; must exit 0."""
    from click.testing import CliRunner

    from readergroup.cli import main

    env = {"COLUMNS": str(columns)} if columns else {}
    done = CliRunner().invoke(main, ["--redis-url", redis_url, *args], env=env)
    assert done.exit_code == 0, done.output
    return done.output


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


class Service:
    """A long-running ``readergroup ARGS`` (a subprocess, REDIS_URL set) whose stdout and stderr
    lines are collected as they come (``collect``), stopped by a signal (``stop``)."""

    def __init__(self, redis_url: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "readergroup.cli", *args],
            env={**os.environ, "REDIS_URL": redis_url},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._lines: queue.Queue[tuple[list[str], str]] = queue.Queue()
        self._readers = [
            threading.Thread(target=self._read, args=(pipe, into), daemon=True)
            for pipe, into in (
                (self.process.stdout, self.stdout),
                (self.process.stderr, self.stderr),
            )
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe: IO[str] | None, into: list[str]) -> None:
        for line in pipe or []:
            self._lines.put((into, line))

    def collect(self) -> None:
        """Take the lines read so far into ``stdout`` and ``stderr``."""
        while not self._lines.empty():
            into, line = self._lines.get()
            into.append(line)

    def printed(self, text: str) -> bool:
        """Whether a line of either output contains ``text``; fails if the command ended."""
        self.collect()
        assert self.process.poll() is None, self.stdout + self.stderr
        return any(text in line for line in self.stdout + self.stderr)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send ``sig``, wait for the exit and every line; the exit code."""
        self.process.send_signal(sig)
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        self.collect()
        return code
