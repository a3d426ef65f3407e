"""An asyncio service producing events: many request tasks share one asyncio writer, some
awaiting each event's acknowledgement, some pipelining, some cancelled mid-write (a client
that hung up). Then a reader group reads the stream back and checks that every event whose
write began is there exactly once, in write order per key, and prints VERIFIED.

    python examples/aio_producer.py [--requests 200] [--events 20] [--scope shop]

Uses ``REDIS_URL`` if set, else starts a private server (the ``embedded`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from readergroup import (
    EventStreamClientFactory,
    EventStreamReader,
    JsonSerializer,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamWriter


async def handle_request(
    writer: AsyncEventStreamWriter[dict[str, int]], request: int, events: int, begun: set[str]
) -> None:
    """One request: ``events`` events of customer ``request % 17``, numbered in order."""
    key = f"customer-{request % 17}"
    for n in range(events):
        begun.add(f"{request}:{n}")  # (no await before the write is queued)
        event = {"request": request, "n": n}
        if n % 2:
            await writer.write_event(event, routing_key=key)  # awaits the acknowledgement
        else:
            await writer.send(event, routing_key=key)  # pipelined: flush() waits for it


async def serve(url: str, scope: str, requests: int, events: int, seed: int) -> set[str]:
    """Run the requests concurrently, cancelling a random fifth of them along the way."""
    rng = random.Random(seed)
    begun: set[str] = set()
    async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
        writer: AsyncEventStreamWriter[dict[str, int]]
        writer = await factory.create_event_writer("orders", JsonSerializer())
        tasks = [
            asyncio.create_task(handle_request(writer, request, events, begun))
            for request in range(requests)
        ]
        for task in rng.sample(tasks, requests // 5):
            await asyncio.sleep(rng.random() * 0.01)
            task.cancel()  # the client hung up: its events already begun still land
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await writer.flush()
    return begun


def read_back(url: str, scope: str, expected: int) -> list[dict[str, int]]:
    with ReaderGroupManager.from_url(scope, url) as groups:
        groups.create_reader_group("audit", ReaderGroupConfig(streams=[f"{scope}/orders"]))
    read: list[dict[str, int]] = []
    with EventStreamClientFactory.from_url(scope, url) as factory:
        reader: EventStreamReader[dict[str, int]]
        reader = factory.create_reader("auditor", "audit", JsonSerializer())
        with reader:
            while len(read) < expected:
                event = reader.read_next_event(timeout=5)
                if event.event is None:
                    break
                read.append(event.event)
    return read


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    from readergroup.testing.embedded_redis import redis_server

    with redis_server() as server:
        yield server.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--scope", default="shop", help="a scope of its own (created)")
    args = parser.parse_args()
    with redis_url() as url:
        with StreamManager.from_url(url) as streams:
            streams.create_scope(args.scope)
            fixed = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
            streams.create_stream(args.scope, "orders", fixed)
        begun = asyncio.run(serve(url, args.scope, args.requests, args.events, args.seed))
        read = read_back(url, args.scope, len(begun))
    landed = [f"{e['request']}:{e['n']}" for e in read]
    per_request: dict[int, list[int]] = defaultdict(list)
    for event in read:
        per_request[event["request"]].append(event["n"])
    exact = sorted(landed) == sorted(begun) and len(landed) == len(set(landed))
    ordered = all(numbers == sorted(numbers) for numbers in per_request.values())
    print(f"begun={len(begun)} read={len(read)} exact={exact} in_order={ordered}")
    if not (exact and ordered):
        sys.exit("NOT VERIFIED")
    print("VERIFIED")


if __name__ == "__main__":
    main()
