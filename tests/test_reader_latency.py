"""A reader on a slow link (a real Redis behind a proxy delaying every reply) keeps delivering."""

from __future__ import annotations

import threading
import time
from urllib.parse import urlparse

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    StreamManager,
    UTF8StringSerializer,
)
from tests.support.proxy import ReplyDroppingProxy

WINDOW = 8.0
"""Seconds events are written for (at ~50 per second, straight to Redis)."""
CATCH_UP = 6.0
"""Seconds after the window within which the reader must have delivered 90% of them."""


@pytest.mark.long  # about 12 s on a slow link (make test-long; CI runs both)
def test_with_200ms_per_reply_and_default_settings_data_keeps_flowing(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s")
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))  # defaults
    written = [0]
    stop = threading.Event()

    def write() -> None:
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            while not stop.wait(0.02):
                writer.write_event(f"e{written[0]}", routing_key="k").result(5)
                written[0] += 1

    target = urlparse(redis_url)
    with (
        ReplyDroppingProxy(target.hostname or "", target.port or 0, reply_delay=0.2) as proxy,
        EventStreamClientFactory.from_url(scope, proxy.url) as slow,
    ):
        reader = slow.create_reader("r", "g", UTF8StringSerializer())
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        delivered: list[str] = []
        calls = 0
        window_ends = time.monotonic() + WINDOW
        try:
            while time.monotonic() < window_ends:  # both ways of reading, in turn
                if calls % 2:
                    delivered += [e.event for e in reader.read_batch(100)]
                else:
                    event = reader.read_next_event()
                    if event.event is not None:
                        delivered.append(event.event)
                calls += 1
        finally:
            stop.set()
            writer.join(10)
        total = written[0]
        deadline = time.monotonic() + CATCH_UP
        while len(delivered) < 0.9 * total and time.monotonic() < deadline:
            delivered += [e.event for e in reader.read_batch(100)]
        reader.close()
    assert total >= 100, f"the writer wrote only {total} events"
    assert len(delivered) >= 0.9 * total, f"{len(delivered)} of {total} delivered ({calls} calls)"
    assert delivered == [f"e{i}" for i in range(len(delivered))]  # in order, none twice
