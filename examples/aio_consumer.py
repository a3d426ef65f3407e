"""An asyncio service consuming a stream with ``async for``: a group of asyncio readers in
one event loop (a worker task each), handling events with an awaited "database write", while
a threaded writer keeps producing and workers come and go (one is cancelled mid-read, as a
service shutting a worker down; another joins late). Every event is checked to be handled, in
write order per key within each reader, none lost; it prints VERIFIED.

    python examples/aio_consumer.py [--events 3000] [--workers 3] [--scope shop]

Uses ``REDIS_URL`` if set, else starts a private server (the ``embedded`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from readergroup import (
    EventStreamClientFactory,
    JsonSerializer,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.aio import AsyncEventStreamClientFactory

FAST = {"heartbeat_interval": 0.2, "session_timeout": 3.0, "group_refresh_time": 0.1}


def produce(url: str, scope: str, events: int) -> None:
    """The producing side (threaded: it runs in a thread beside the loop)."""
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer("payments", JsonSerializer())
        for n in range(events):
            writer.write_event({"customer": n % 23, "n": n}, routing_key=f"c{n % 23}")
        writer.flush()


async def worker(
    factory: AsyncEventStreamClientFactory, name: str, handled: list[tuple[str, dict[str, int]]]
) -> None:
    """One worker: ``async for`` over its reader; leaving ``async with`` (also when the task is
    cancelled) commits what was handed out and gives its segments back to the others. So the
    event being handled is finished even when the worker is cancelled (``shield``): in auto
    mode an event handed out counts as processed once the reader moves on or closes."""

    async def store(value: dict[str, int]) -> None:
        await asyncio.sleep(0)  # the application's awaited work (a database write)
        handled.append((name, value))

    async with await factory.create_reader(name, "billing", JsonSerializer()) as reader:
        async for event in reader:
            if event.is_checkpoint:
                continue
            await asyncio.shield(store(event.event))


async def serve(
    url: str, scope: str, events: int, workers: int
) -> list[tuple[str, dict[str, int]]]:
    handled: list[tuple[str, dict[str, int]]] = []
    async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
        tasks = [asyncio.create_task(worker(factory, f"w{i}", handled)) for i in range(workers)]
        producing = asyncio.create_task(asyncio.to_thread(produce, url, scope, events))
        while len(handled) < events // 3:
            await asyncio.sleep(0.01)
        tasks[0].cancel()  # a worker shut down mid-stream: its reader leaves the group
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[0]
        tasks.append(asyncio.create_task(worker(factory, "late", handled)))  # one joins
        await producing
        async with asyncio.timeout(60):
            while len({(e["customer"], e["n"]) for _, e in handled}) < events:
                await asyncio.sleep(0.01)
        for task in tasks[1:]:
            task.cancel()
        await asyncio.gather(*tasks[1:], return_exceptions=True)
    return handled


def verify(handled: list[tuple[str, dict[str, int]]], events: int) -> bool:
    seen = {e["n"] for _, e in handled}
    last: dict[tuple[str, int], int] = {}
    in_order = True
    for name, event in handled:
        key = (name, event["customer"])
        if last.get(key, -1) >= event["n"]:
            in_order = False
        last[key] = event["n"]
    repeats = len(handled) - len(seen)
    print(f"handled={len(handled)} distinct={len(seen)} of {events} repeats={repeats}")
    print(f"workers={sorted({name for name, _ in handled})} in_order_per_reader={in_order}")
    return seen == set(range(events)) and in_order


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    from readergroup.testing.embedded_redis import redis_server

    with redis_server() as server:
        yield server.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--scope", default=f"shop{uuid.uuid4().hex[:6]}")
    args = parser.parse_args()
    with redis_url() as url:
        with StreamManager.from_url(url) as streams:
            streams.create_scope(args.scope)
            streams.create_stream(
                args.scope, "payments", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(6))
            )
        with ReaderGroupManager.from_url(args.scope, url) as groups:
            groups.create_reader_group(
                "billing", ReaderGroupConfig(streams=[f"{args.scope}/payments"], **FAST)
            )
        handled = asyncio.run(serve(url, args.scope, args.events, args.workers))
    if not verify(handled, args.events):
        print("FAILED")
        sys.exit(1)
    print("VERIFIED")


if __name__ == "__main__":
    main()
