"""``run()``: events go to workers a run of one segment at a time; failures, ``on_error`` and
commits stay exact at that granularity (real Redis)."""

from __future__ import annotations

import threading
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


def setup(redis_url: str, scope: str, factory: EventStreamClientFactory, events: int) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
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
