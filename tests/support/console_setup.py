"""Streams and groups for the console's tests and bench."""

from __future__ import annotations

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupManager,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.stream_config import ScalingPolicy, StreamConfiguration


def make_stream(url: str, scope: str, segments: int, events: int = 0, name: str = "orders") -> None:
    """Stream ``scope/name`` of ``segments`` segments holding ``events`` events (64 keys)."""
    with StreamManager.from_url(url) as sm:
        sm.create_stream(
            scope, name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )
    if not events:
        return
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer(name, UTF8StringSerializer())
        for n in range(events):
            writer.write_event(f"e{n}", routing_key=f"k{n % 64}")
        writer.flush()
        writer.close()


def make_group(
    url: str, scope: str, name: str = "billing", stream: str = "orders", **config: float
) -> None:
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group(name, ReaderGroupConfig(streams=[f"{scope}/{stream}"], **config))
