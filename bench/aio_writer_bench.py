"""asyncio writer benchmark (issue 29): the asyncio writer against the threaded one.

Against one private server (nothing else talks to it), each path alone in its own process
(spawned one after the other, never two at once), each into a fresh one-segment stream, the
same events (``--size`` bytes, routing keys ``k0..k99``), the paths alternated ``--repeat``
times and the median kept:

* ``sync_awaited``: ``EventStreamWriter.write_event(...).result()``, one event at a time
  (``--awaited-events``): each event's round trip, waited for;
* ``async_awaited``: ``await AsyncEventStreamWriter.write_event(...)``, one at a time;
* ``sync_pipelined``: ``write_event`` ``--pipelined-events`` times (300,000), then ``flush()``;
* ``async_pipelined``: ``await writer.send(...)`` as many times, then ``await flush()``.

For each: events/s (wall clock) and the client process's CPU seconds per million events (every
thread: the sender thread counts), both over the writes alone; for the asyncio paths also the
event loop's p99 lag (how late a probe task asking to run every millisecond runs, ms), and
the same with the loop idle just before, as the baseline. Ratios: async over sync, per
mode (events/s: >= 1 is the asyncio writer as fast or faster; CPU: <= 1 is it cheaper).
Prints JSON.
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

from bench.common import add_run, async_vs_sync, emit, new_figures, run_processes
from readergroup import BytesSerializer, EventStreamClientFactory, StreamManager
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.testing.embedded_redis import local_redis_server

PATHS = ("sync_awaited", "async_awaited", "sync_pipelined", "async_pipelined")


def _events(count: int, size: int) -> list[tuple[bytes, str]]:
    payload = b"x" * size
    return [(payload, f"k{i % 100}") for i in range(count)]


def _sync(
    url: str, scope: str, stream: str, events: list[tuple[bytes, str]], awaited: bool
) -> tuple[float, float]:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer(stream, BytesSerializer())
        writer.write_event(b"warm-up").result()
        cpu, started = time.process_time(), time.perf_counter()
        if awaited:
            for payload, key in events:
                writer.write_event(payload, routing_key=key).result()
        else:
            for payload, key in events:
                writer.write_event(payload, routing_key=key)
            writer.flush()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        writer.close()
    return elapsed, cpu


async def _async(
    url: str, scope: str, stream: str, events: list[tuple[bytes, str]], awaited: bool
) -> tuple[float, float, float, float]:
    """Seconds and CPU seconds taken, the event loop's p99 lag meanwhile and, as the
    baseline, while the loop has nothing else to do (ms): how late a probe task asking to run
    every millisecond runs (on a loaded machine the process is also descheduled: that is in
    both)."""
    lags: list[float] = []

    async def probe() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - before - 0.001)

    async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
        writer = await factory.create_event_writer(stream, BytesSerializer())
        await writer.write_event(b"warm-up")
        probing = asyncio.create_task(probe())
        await asyncio.sleep(0.5)
        idle, lags = _p99_ms(lags), []
        cpu, started = time.process_time(), time.perf_counter()
        if awaited:
            for payload, key in events:
                await writer.write_event(payload, routing_key=key)
        else:
            for payload, key in events:
                await writer.send(payload, routing_key=key)
            await writer.flush()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        probing.cancel()
    return elapsed, cpu, _p99_ms(lags), idle


def _p99_ms(lags: list[float]) -> float:
    ordered = sorted(lags)
    return 1000 * ordered[int(len(ordered) * 0.99)] if ordered else float("nan")


def _one_path(
    path: str, url: str, scope: str, stream: str, count: int, size: int, start: Any, results: Any
) -> None:
    events = _events(count, size)
    start.wait()
    awaited = path.endswith("awaited")
    lag = idle = float("nan")
    if path.startswith("sync"):
        elapsed, cpu = _sync(url, scope, stream, events, awaited)
    else:
        elapsed, cpu, lag, idle = asyncio.run(_async(url, scope, stream, events, awaited))
    results.put({"path": path, "seconds": elapsed, "cpu": cpu, "lag": lag, "idle": idle})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--awaited-events", type=int, default=3_000)
    parser.add_argument("--pipelined-events", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures = new_figures(PATHS)
    with local_redis_server() as server:
        scope = f"b{uuid.uuid4().hex[:8]}"
        with StreamManager.from_url(server.url) as manager:
            manager.create_scope(scope)
            for _ in range(args.repeat):
                for path in PATHS:
                    stream = f"{path.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
                    manager.create_stream(scope, stream)
                    count = args.awaited_events if "awaited" in path else args.pipelined_events
                    (result,) = run_processes(
                        _one_path, [(path, server.url, scope, stream, count, args.size)]
                    )
                    add_run(figures, result, count, 1e6)
    results = async_vs_sync(
        figures,
        ("awaited", "pipelined"),
        rate="events_per_s",
        cpu="client_cpu_s_per_million_events",
        rate_digits=None,
    )
    results["settings"] = vars(args) | {"load_average": os.getloadavg()}
    emit("aio_writer", results)


if __name__ == "__main__":
    main()
