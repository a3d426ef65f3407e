"""Shutting a consumer down on SIGTERM (issue 35 item 7): iteration with the reader's signal
handlers ends cleanly, the reader commits what was handled and leaves at once, so the next
reader gets exactly the rest (nothing twice, nobody waits for the session to expire)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
EVENTS = 2000


def test_sigterm_ends_iteration_cleanly_and_the_next_reader_gets_exactly_the_rest(
    redis_url: str, scope: str, tmp_path: Path
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group(
            "g", ReaderGroupConfig(streams=[f"{scope}/s"], session_timeout=60.0)
        )
        group = rgm.get_reader_group("g")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(EVENTS):
                writer.write_event(f"e{i}", routing_key=f"k{i % 8}")
        out = tmp_path / "first.events"
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.support.iterating_reader", redis_url, scope, "g",
             "first", str(out)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        try:
            wait_until(lambda: out.exists() and len(out.read_text().split()) >= 100, 60)
            child.send_signal(signal.SIGTERM)
            assert child.wait(30) == 0
        finally:
            if child.poll() is None:
                child.kill()
        first = out.read_text().split()
        assert group.get_online_readers() == []  # it left: nobody waits for its session
        rest: list[str] = []
        with factory.create_reader("second", "g", UTF8StringSerializer()) as reader:
            while len(first) + len(rest) < EVENTS:
                batch = reader.read_batch(500, timeout=2)
                assert batch, f"{len(first)} + {len(rest)} of {EVENTS}"
                rest += [e.event for e in batch]
    assert len(first) < EVENTS
    assert sorted(first + rest) == sorted(f"e{i}" for i in range(EVENTS))  # each exactly once
