"""The asyncio API on a Redis Cluster against the threaded one, same cluster, same run (issue 29).

A local 3-master cluster; a stream of ``--segments`` segments (spread over the masters) of
``--events`` events of 100 bytes, 30 routing keys. Each path runs alone in a spawned process
of its own, one after the other (medians of ``--repeat``):

* ``threaded_write`` / ``async_write``: a writer sends every event and flushes (the asyncio
  writer's ``send`` futures; the threaded writer's ``write_event`` then ``flush``);
* ``threaded_read`` / ``async_read``: one reader of a new group reads every event
  (``read_batch(1000)``; the asyncio reader awaited), timed from the first event read (its
  join not counted);
* ``threaded_idle`` / ``async_idle``: one reader with nothing to read for ``--idle`` s: the
  client CPU it burns per second (a cluster's reads poll: one ``XREAD`` per slot, then a
  block of at most 0.1 s on the group's log).

Rates are per wall-clock second; ratios are the asyncio path's over the threaded one's.
Prints JSON with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import emit, median, run_processes
from readergroup import (
    BytesSerializer,
    ClientConfig,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.testing.embedded_redis import local_redis_cluster

CLUSTER = ClientConfig(cluster=True)
GROUP: dict[str, Any] = {
    "group_refresh_time": 0.1,
    "heartbeat_interval": 1.0,
    "session_timeout": 10.0,
}
PAYLOAD = b"x" * 100


def _events(count: int) -> list[tuple[bytes, str]]:
    return [(PAYLOAD, f"k{n % 30}") for n in range(count)]


def _threaded_write(url: str, scope: str, stream: str, count: int) -> None:
    with EventStreamClientFactory.from_url(scope, url, CLUSTER) as factory:
        writer = factory.create_event_writer(stream, BytesSerializer())
        for payload, key in _events(count):
            writer.write_event(payload, routing_key=key)
        writer.flush()
        writer.close()


async def _async_write(url: str, scope: str, stream: str, count: int) -> None:
    async with AsyncEventStreamClientFactory.from_url(scope, url, CLUSTER) as factory:
        writer = await factory.create_event_writer(stream, BytesSerializer())
        for payload, key in _events(count):
            await writer.send(payload, routing_key=key)
        await writer.flush()
        await writer.close()


def _threaded_read(url: str, scope: str, group: str, count: int, idle: float) -> list[float]:
    with EventStreamClientFactory.from_url(scope, url, CLUSTER) as factory:
        reader = factory.create_reader("r", group, BytesSerializer())
        clock = _ReadClock(count)
        while clock.running():
            clock.got(len(reader.read_batch(1000, timeout=0.2)))
        cpu_before, until = time.process_time(), time.monotonic() + idle
        while time.monotonic() < until:
            assert not reader.read_batch(1000, timeout=0.2)
        reader.close()
        return [clock.seconds(), (time.process_time() - cpu_before) / idle]


async def _async_read(url: str, scope: str, group: str, count: int, idle: float) -> list[float]:
    async with AsyncEventStreamClientFactory.from_url(scope, url, CLUSTER) as factory:
        reader = await factory.create_reader("r", group, BytesSerializer())
        clock = _ReadClock(count)
        while clock.running():
            clock.got(len(await reader.read_batch(1000, timeout=0.2)))
        cpu_before, until = time.process_time(), time.monotonic() + idle
        while time.monotonic() < until:
            assert not await reader.read_batch(1000, timeout=0.2)
        await reader.close()
        return [clock.seconds(), (time.process_time() - cpu_before) / idle]


class _ReadClock:
    """Times reading ``count`` events from the first one read (the join is not counted)."""

    def __init__(self, count: int) -> None:
        self.count, self.read, self.first, self.last = count, 0, 0.0, 0.0
        self.deadline = time.monotonic() + 120

    def running(self) -> bool:
        return self.read < self.count and time.monotonic() < self.deadline

    def got(self, events: int) -> None:
        if events and not self.read:
            self.first = time.perf_counter()
        self.read += events
        self.last = time.perf_counter()

    def seconds(self) -> float:
        return self.last - self.first


def _run(
    path: str, url: str, scope: str, name: str, count: int, idle: float, start: Any, out: Any
) -> None:
    start.wait()
    cpu = float("nan")
    began = time.perf_counter()
    if path == "threaded_write":
        _threaded_write(url, scope, name, count)
    elif path == "async_write":
        asyncio.run(_async_write(url, scope, name, count))
    elif path == "threaded_read":
        seconds, cpu = _threaded_read(url, scope, name, count, idle)
    else:
        seconds, cpu = asyncio.run(_async_read(url, scope, name, count, idle))
    if path.endswith("write"):
        seconds = time.perf_counter() - began
    out.put({"path": path, "seconds": seconds, "idle_cpu": cpu})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--segments", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle", type=float, default=5.0)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {}
    idle: dict[str, list[float]] = {}
    with local_redis_cluster(3) as cluster:
        url = cluster.url
        scope = f"bench{uuid.uuid4().hex[:6]}"
        fixed = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(args.segments))
        with StreamManager.from_url(url, CLUSTER) as streams:
            streams.create_scope(scope)
            streams.create_stream(scope, "read", fixed)
            for run in range(args.repeat):
                for path in ("threaded_write", "async_write"):
                    streams.create_stream(scope, f"{path}{run}", fixed)
        _threaded_write(url, scope, "read", args.events)
        with ReaderGroupManager.from_url(scope, url, CLUSTER) as groups:
            for run in range(args.repeat):
                for path in ("threaded_read", "async_read"):
                    config = ReaderGroupConfig(streams=[f"{scope}/read"], **GROUP)
                    groups.create_reader_group(f"{path}{run}", config)
        for run in range(args.repeat):
            for path in ("threaded_write", "async_write", "threaded_read", "async_read"):
                [result] = run_processes(
                    _run, [(path, url, scope, f"{path}{run}", args.events, args.idle)]
                )
                rates.setdefault(path, []).append(args.events / result["seconds"])
                if path.endswith("read"):
                    idle.setdefault(path, []).append(result["idle_cpu"])
    figures: dict[str, Any] = {
        path: {"events_per_s": round(median(values)), "runs": [round(v) for v in values]}
        for path, values in rates.items()
    }
    for path, values in idle.items():
        figures[path]["idle_cpu_s_per_s"] = round(median(values), 4)
    figures["ratios"] = {
        "async_write/threaded_write": round(
            median(rates["async_write"]) / median(rates["threaded_write"]), 2
        ),
        "async_read/threaded_read": round(
            median(rates["async_read"]) / median(rates["threaded_read"]), 2
        ),
        "async_idle_cpu/threaded_idle_cpu": round(
            median(idle["async_read"]) / median(idle["threaded_read"]), 2
        ),
    }
    figures["load_average"] = os.getloadavg()
    figures["events"], figures["segments"] = args.events, args.segments
    emit("aio_cluster", figures)


if __name__ == "__main__":
    main()
