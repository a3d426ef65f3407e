"""asyncio managers benchmark (issue 29): the asyncio managers against the threaded ones.

Against one private server, each path alone in its own process (one after the other), the
same calls on the same stream (``--segments`` segments, ``--events`` events) and group (one
offline reader's committed positions), ``--calls`` times, the paths alternated ``--repeat``
times and the median kept:

* ``sync_info`` / ``async_info``: ``StreamManager.get_stream_info`` /
  ``await AsyncStreamManager.get_stream_info`` (metadata fetch, scale completion check,
  segment states);
* ``sync_lag`` / ``async_lag``: ``ReaderGroup.get_metrics`` / ``await
  AsyncReaderGroup.get_metrics`` (group fetch, stream metadata, lag probe).

For each: calls/s and the client process's CPU ms per call; for the asyncio paths also the
event loop's p99 lag while calling (a probe task asking to run every millisecond, ms) and
idle just before (the baseline). Ratios async over sync (calls/s >= 1: as fast or faster;
CPU <= 1: cheaper). Prints JSON.
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

from bench.aio_writer_bench import _p99_ms
from bench.common import add_run, async_vs_sync, emit, new_figures, run_processes
from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.aio import AsyncEventStreamClientFactory

PATHS = ("sync_info", "async_info", "sync_lag", "async_lag")


def _sync(url: str, scope: str, what: str, calls: int) -> tuple[float, float]:
    with StreamManager.from_url(url) as streams, ReaderGroupManager.from_url(scope, url) as rgm:
        group = rgm.get_reader_group("g")
        call = (
            (lambda: streams.get_stream_info(scope, "s")) if what == "info" else group.get_metrics
        )
        call()
        cpu, started = time.process_time(), time.perf_counter()
        for _ in range(calls):
            call()
        return time.perf_counter() - started, time.process_time() - cpu


async def _async(url: str, scope: str, what: str, calls: int) -> tuple[float, float, float, float]:
    lags: list[float] = []

    async def probe() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - before - 0.001)

    async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
        streams = factory.stream_manager()
        group = await factory.reader_group_manager().get_reader_group("g")
        call = (
            (lambda: streams.get_stream_info(scope, "s")) if what == "info" else group.get_metrics
        )
        await call()
        probing = asyncio.create_task(probe())
        await asyncio.sleep(0.5)
        idle, lags = _p99_ms(lags), []
        cpu, started = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await call()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        probing.cancel()
    return elapsed, cpu, _p99_ms(lags), idle


def _one_path(path: str, url: str, scope: str, calls: int, start: Any, results: Any) -> None:
    start.wait()
    what = path.split("_")[1]
    lag = idle = float("nan")
    if path.startswith("sync"):
        elapsed, cpu = _sync(url, scope, what, calls)
    else:
        elapsed, cpu, lag, idle = asyncio.run(_async(url, scope, what, calls))
    results.put({"path": path, "seconds": elapsed, "cpu": cpu, "lag": lag, "idle": idle})


def _set_up(url: str, segments: int, events: int) -> str:
    scope = f"b{uuid.uuid4().hex[:8]}"
    with StreamManager.from_url(url) as manager:
        manager.create_scope(scope)
        policy = ScalingPolicy.fixed(segments)
        manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=policy))
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer("s", BytesSerializer())
        for i in range(events):
            writer.write_event(b"x" * 100, routing_key=f"k{i}")
        writer.flush()
        with ReaderGroupManager.from_url(scope, url) as rgm:
            rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))
        with factory.create_reader("r", "g", BytesSerializer()) as reader:
            reader.read_batch(events // 2, timeout=5)
            reader.commit()
    return scope


def main() -> None:
    from readergroup.testing.embedded_redis import local_redis_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--segments", type=int, default=16)
    parser.add_argument("--events", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures = new_figures(PATHS)
    with local_redis_server() as server:
        scope = _set_up(server.url, args.segments, args.events)
        for _ in range(args.repeat):
            for path in PATHS:
                (result,) = run_processes(_one_path, [(path, server.url, scope, args.calls)])
                add_run(figures, result, args.calls, 1e3)
    results = async_vs_sync(
        figures, ("info", "lag"), rate="calls_per_s", cpu="client_cpu_ms_per_call"
    )
    results["settings"] = vars(args) | {"load_average": os.getloadavg()}
    emit("aio_admin", results)


if __name__ == "__main__":
    main()
