"""``run()``: events go to workers a run of one segment at a time; failures, ``on_error`` and
commits stay exact at that granularity (real Redis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.client.event_read import EventRead, by_segment
from readergroup.core.group_state import SegKey

QUEUED = 400
"""Events written for the stop tests: all of them are read (queued) long before the slow
handler gets through them."""

SLOW_HANDLER_SECONDS = 0.05
"""What each event costs the handler of the stop tests (its work, not a wait)."""


def setup(
    redis_url: str, scope: str, factory: EventStreamClientFactory, events: int, segments: int = 2
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(
            scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )
    with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
        for i in range(events):
            writer.write_event(f"e{i}", routing_key=f"k{i % 7}")
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group(
            "g", ReaderGroupConfig(streams=[f"{scope}/s"], commit_mode="manual")
        )


def committed(reader: Any) -> int:
    return sum(reader._member.refresh().positions().values())


def test_a_failing_handler_stops_the_run_and_only_what_was_handled_is_committed(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    setup(redis_url, scope, factory, 60)
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    handled: list[str] = []

    def handler(event: EventRead[str]) -> None:
        if event.event == "e30":
            raise ValueError("boom")
        handled.append(event.event or "")

    with pytest.raises(ValueError, match="boom"):
        reader.run(handler, max_workers=2, handle_signals=False)
    assert "e30" not in handled
    # every event handled before e30 in its segment is committed; e30 and after are not
    assert committed(reader) <= len(handled) < 60
    reader.close()


def test_on_error_takes_failures_and_the_run_commits_everything(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    setup(redis_url, scope, factory, 60)
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    stop = threading.Event()
    seen: list[str] = []
    failed: list[str] = []

    def handler(event: EventRead[str]) -> None:
        seen.append(event.event or "")
        if len(seen) == 60:
            stop.set()
        if (event.offset or 0) % 10 == 3:
            raise ValueError(event.event)

    stats = reader.run(
        handler,
        max_workers=2,
        stop=stop,
        handle_signals=False,
        on_error=lambda event, exc: failed.append(str(exc)),
    )
    assert sorted(seen) == sorted(f"e{i}" for i in range(60))
    assert stats.handled == 60 and stats.failed == 0 and len(failed) >= 2
    assert committed(reader) == 60
    reader.close()


def test_a_batch_is_cut_into_runs_per_segment_in_order(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    setup(redis_url, scope, factory, 40)
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    batch: list[EventRead[str]] = []
    while len(batch) < 40:
        batch += reader.read_batch(1000, timeout=2)
    runs = by_segment(batch)
    assert [e for _, run in runs for e in run] == batch  # nothing lost, nothing reordered
    for key, run in runs:
        assert {(e.stream, e.segment) for e in run} == {key}
    assert len({key for key, _ in runs}) == 2
    reader.close()


def handled_positions(handled: dict[SegKey, list[int]]) -> dict[SegKey, int]:
    """Per segment, the position after the last handled event, checking that each segment's
    events were handled in order from its start (the group's first run)."""
    for offsets in handled.values():
        assert offsets == list(range(len(offsets)))
    return {key: offsets[-1] + 1 for key, offsets in handled.items()}


def read_the_rest(factory: EventStreamClientFactory, wanted: int) -> list[str]:
    """What a new reader of the group gets, once it got ``wanted`` events (or its deadline
    passed)."""
    got: list[str] = []
    deadline = time.monotonic() + 60
    with factory.create_reader("successor", "g", UTF8StringSerializer()) as successor:
        while len(got) < wanted and time.monotonic() < deadline:
            got += [e.event or "" for e in successor.read_batch(1000, timeout=0.5)]
        got += [e.event or "" for e in successor.read_batch(1000, timeout=0.5)]  # no more
    return got


def assert_given_back(
    factory: EventStreamClientFactory, handled: dict[SegKey, list[int]], names: set[str]
) -> None:
    """The successor gets exactly the events not handled: none skipped, none twice."""
    rest = read_the_rest(factory, QUEUED - len(names))
    assert len(rest) == len(set(rest))
    assert set(rest) == {f"e{i}" for i in range(QUEUED)} - names


def test_a_stop_ends_the_run_after_the_events_in_progress_and_gives_the_rest_back(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    """Issue 35 item 6: a slow handler and a deep queue; a stop must not wait for the queue to
    be handled. Each worker finishes its event in progress, the handled events are committed
    exactly, and the rest goes to the next owner."""
    setup(redis_url, scope, factory, QUEUED, segments=4)
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    stop = threading.Event()
    lock = threading.Lock()
    handled: dict[SegKey, list[int]] = defaultdict(list)
    names: set[str] = set()
    at_stop: list[int] = []

    def handler(event: EventRead[str]) -> None:
        time.sleep(SLOW_HANDLER_SECONDS)
        with lock:
            handled[(event.stream, event.segment)].append(event.offset or 0)
            names.add(event.event or "")
            if len(names) == 20:
                at_stop.append(len(names))
                stop.set()

    workers = 4
    stats = reader.run(handler, max_workers=workers, stop=stop, handle_signals=False)
    # the stopping handler's own event was counted: only the others in progress came after
    assert at_stop == [20] and stats.handled - 20 < workers, stats
    assert stats.handled == len(names) and stats.given_back > 0, stats
    committed_now = reader._member.refresh().positions()
    assert {k: p for k, p in committed_now.items() if p} == handled_positions(handled)
    reader.close()
    assert_given_back(factory, handled, names)


def test_a_stop_in_the_automatic_commit_mode_still_loses_nothing(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    """The automatic mode commits what the reader handed out (and so does its close): events
    left queued there would be skipped, so a stop handles them first."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4)))
    with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
        for i in range(QUEUED):
            writer.write_event(f"e{i}", routing_key=f"k{i % 7}")
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))  # auto
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    stop = threading.Event()
    lock = threading.Lock()
    names: set[str] = set()

    def handler(event: EventRead[str]) -> None:
        time.sleep(SLOW_HANDLER_SECONDS / 10)
        with lock:
            names.add(event.event or "")
            if len(names) == 20:
                stop.set()

    stats = reader.run(handler, max_workers=4, stop=stop, handle_signals=False)
    reader.close()
    assert stats.given_back == 0 and stats.handled == len(names), stats
    rest = read_the_rest(factory, QUEUED - len(names))
    assert names | set(rest) == {f"e{i}" for i in range(QUEUED)}


CHILD = """
import json, os, signal, sys, threading, time
from readergroup import EventStreamClientFactory, UTF8StringSerializer

url, scope, slow = sys.argv[1], sys.argv[2], float(sys.argv[3])
lock = threading.Lock()
handled = []
at_stop = []

class Stop(threading.Event):
    def set(self):  # called by the runner's SIGTERM handler: how many were handled by then
        with lock:
            at_stop.append(len(handled))
        super().set()

def handler(event):
    time.sleep(slow)
    with lock:
        handled.append([event.segment, event.offset, event.event])
        if len(handled) == 20:
            os.kill(os.getpid(), signal.SIGTERM)

with EventStreamClientFactory.from_url(scope, url) as factory:
    with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
        stats = reader.run(handler, max_workers=4, stop=Stop())
print(json.dumps({"handled": handled, "at_stop": at_stop, "stats": stats.__dict__}))
"""


@pytest.mark.slow
def test_sigterm_ends_the_run_after_the_events_in_progress_and_gives_the_rest_back(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    """Item 6 through the real signal: a process whose slow handler is deep in its queue gets
    SIGTERM (from its own handler); it stops after the events in progress (counted from when
    the signal set the run's stop event), commits them, leaves the group, and exits."""
    setup(redis_url, scope, factory, QUEUED, segments=4)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, redis_url, scope, str(SLOW_HANDLER_SECONDS)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    report = json.loads(child.stdout.strip().splitlines()[-1])
    [at_stop] = report["at_stop"]
    assert at_stop >= 20 and report["stats"]["handled"] - at_stop <= 4, report  # 4 workers
    handled: dict[SegKey, list[int]] = defaultdict(list)
    for segment, offset, _ in report["handled"]:
        handled[("s", segment)].append(offset)
    handled_positions(handled)  # in order per segment
    assert_given_back(factory, handled, {name for _, _, name in report["handled"]})
