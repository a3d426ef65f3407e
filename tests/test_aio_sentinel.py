"""The asyncio writer on ``redis+sentinel://`` (issue 29): it writes to the primary the
Sentinels name and follows a forced failover. Real servers and Sentinels
(``valkey-server --sentinel``) started by the test."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from readergroup import (
    ClientConfig,
    EventStreamClientFactory,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.testing.embedded_redis import LocalSentinelGroup, local_sentinel_group


@pytest.fixture
def sentinels() -> Iterator[LocalSentinelGroup]:
    with local_sentinel_group(replicas=1, sentinels=3) as group:
        yield group


def _stored(url: str) -> set[str]:
    with EventStreamClientFactory.from_url("ha", url) as factory:
        batch = factory.create_batch_client()
        return {e.payload.decode() for e in batch.read_events("orders")}


def _create(url: str) -> None:
    with StreamManager.from_url(url) as sm:
        sm.create_scope("ha")
        sm.create_stream("ha", "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))


def test_the_asyncio_writer_writes_to_the_primary_the_sentinels_name(
    sentinels: LocalSentinelGroup,
) -> None:
    _create(sentinels.url)

    async def main() -> None:
        async with AsyncEventStreamClientFactory.from_url("ha", sentinels.url) as factory:
            writer = await factory.create_event_writer("orders", UTF8StringSerializer())
            for i in range(20):
                await writer.send(f"a{i}", routing_key=f"k{i}")
            await writer.flush()

    asyncio.run(main())
    assert _stored(sentinels.url) == {f"a{i}" for i in range(20)}


@pytest.mark.long  # a forced failover: about 20 s
def test_the_asyncio_writer_follows_a_sentinel_failover(sentinels: LocalSentinelGroup) -> None:
    _create(sentinels.url)
    config = ClientConfig(acks="replicas=1", ack_timeout=1.0)

    async def main() -> None:
        async with AsyncEventStreamClientFactory.from_url("ha", sentinels.url, config) as factory:
            writer = await factory.create_event_writer("orders", UTF8StringSerializer())
            for i in range(10):
                await writer.write_event(f"a{i}", routing_key=f"k{i}")
            await asyncio.to_thread(sentinels.failover)
            for i in range(10):  # retried onto the new primary once a replica follows it
                await asyncio.wait_for(writer.write_event(f"b{i}", routing_key=f"k{i}"), 60)

    asyncio.run(main())
    assert _stored(sentinels.url) == {f"{p}{i}" for p in "ab" for i in range(10)}
