"""Async read-path benchmark: per-event reads of the asyncio fetcher against the threaded one,
same layer, same run; and the event loop's lag while the asyncio fetcher delivers flat out.

One server, one one-segment stream of ``--events`` events of 100 bytes. Each path runs alone in
a spawned process of its own (best of ``--repeat``), reading every event one at a time at the
fetcher layer (the async reader is built on it next; until then this compares like with like):

* ``sync_fetcher``: the threaded :class:`~readergroup.client.fetcher.Fetcher` as
  ``read_next_event`` drives it, one call per event: ``take_one()`` (the fast path), else
  ``take(1, refill=True)``, else ``fetch`` (the baseline);
* ``async_fetcher``: :class:`~readergroup.client.aio_fetcher.AsyncFetcher` the same way, one
  awaited coroutine per event: ``take_one()`` (and ``await take_turn()`` when ``turn_due()``: a
  turn of the loop at least every millisecond), else ``await take_refilled(1)``, else ``await
  fetch``. Goal: >= 0.9x ``sync_fetcher``;
* ``sync_fetcher_iterated`` / ``async_fetcher_iterated``: the same through a generator (``for``)
  and an async generator (``async for``): the shapes of ``for event in reader`` and ``async
  for event in reader``;
* ``async_fetcher_probed``: the same with a probe task in the loop scheduling itself every 1 ms;
  reported: the rate, and the probe's lag (how late it woke) p50/p99/max, next to the same
  probe's lag in the same process with the loop idle just before (what the machine's load
  adds); ``async_fetcher_probed_50k`` the same at 50k events/s. Goal: p99 <= 5 ms while one
  fetcher delivers 50k events/s;
* ``read_next_event``: the threaded reader's ``read_next_event()`` loop, for reference (the
  user-level path over ``sync_fetcher``: the group session's share).

Rates are per wall-clock second and per client CPU-second. Prints JSON with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.common import emit, run_processes
from bench.readergroup_bench import _write
from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    StreamManager,
)
from readergroup.client.aio_fetcher import AsyncFetcher
from readergroup.client.event_read import EventRead
from readergroup.client.fetch_core import FetchCore, Outage, OwnedSegment
from readergroup.client.fetcher import Fetcher
from readergroup.storage.aio_reads import AsyncSegmentReads
from readergroup.storage.connection import RedisConnection
from readergroup.storage.multi_read import MAX_BLOCK_SECONDS
from readergroup.testing.embedded_redis import redis_server
from statesync.system_clock import SYSTEM_CLOCK
from tests.support.fetchers import next_event

PATHS = (
    "sync_fetcher",
    "async_fetcher",
    "sync_fetcher_iterated",
    "async_fetcher_iterated",
    "async_fetcher_probed",
    "async_fetcher_probed_50k",
    "read_next_event",
)
PACED_RATE = 50_000
"""Events per second the ``_50k`` path hands out (the issue's lag goal is stated at it)."""


def _own(core: FetchCore[Any], connection: RedisConnection, scope: str) -> None:
    data_key = connection.keys.segment(scope, "s", 0).events
    core.add(OwnedSegment.at((f"{scope}/s", 0), scope, "s", data_key, 1, 0))


def _next_event(fetcher: Fetcher[bytes]) -> EventRead[bytes]:
    """The next event as ``read_next_event`` gets it from the threaded fetcher."""
    while True:
        event = fetcher.take_one()
        if event is not None:
            return event
        if fetcher.errors:
            raise fetcher.errors.popleft()
        taken = fetcher.take(1, refill=True)
        if taken:
            return taken[0]
        fetcher.fetch(0.05, {}, hold=0.5)


def _events(fetcher: Fetcher[bytes]) -> Iterator[EventRead[bytes]]:
    """``for event in reader``'s shape: a generator (the fast path inlined, as there)."""
    while True:
        event = fetcher.take_one()
        yield _next_event(fetcher) if event is None else event


async def _events_async(fetcher: AsyncFetcher[bytes]) -> AsyncIterator[EventRead[bytes]]:
    """``async for event in reader``'s shape: an async generator."""
    while True:
        event = fetcher.take_one()
        if event is None:
            event = await next_event(fetcher)
        elif fetcher.turn_due():
            await fetcher.take_turn()
        yield event


def _sync_fetcher(
    connection: RedisConnection, scope: str, events: int, iterated: bool, start: Any
) -> int:
    fetcher = Fetcher(
        connection, BytesSerializer(), ReaderConfig(), Outage("b", 10.0), SYSTEM_CLOCK
    )
    _own(fetcher, connection, scope)
    start.wait()
    count = 0
    if iterated:
        for _ in _events(fetcher):
            count += 1
            if count >= events:
                break
    else:
        while count < events:
            _next_event(fetcher)
            count += 1
    fetcher.close()
    return count


async def _async_fetcher(
    url: str, connection: RedisConnection, scope: str, events: int, how: str, row: Any
) -> None:
    client = redis.asyncio.Redis.from_url(
        url, retry=Retry(NoBackoff(), 0), socket_timeout=MAX_BLOCK_SECONDS + 5
    )
    reads = AsyncSegmentReads(client, connection.keys)
    fetcher = AsyncFetcher(
        reads, BytesSerializer(), ReaderConfig(), Outage("b", 10.0), SYSTEM_CLOCK
    )
    _own(fetcher, connection, scope)
    lags: list[float] = []
    running = True

    async def probe() -> None:
        while running:
            began = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - began - 0.001)

    probed = "probed" in how
    if probed:  # the same probe with the loop otherwise idle first: what the machine adds
        prober = asyncio.ensure_future(probe())
        await asyncio.sleep(0.5)
        running = False
        await prober
        row["idle_lag_ms"] = _percentiles(lags)
        lags.clear()
        running = True
        prober = asyncio.ensure_future(probe())
    row["start"].wait()
    began, used = time.perf_counter(), time.process_time()
    count = 0
    if how.endswith("50k"):
        while count < events:
            await next_event(fetcher)
            count += 1
            if count % 100 == 0:  # hold the pace: wait for this event's slot
                await asyncio.sleep(max(0.0, began + count / PACED_RATE - time.perf_counter()))
    elif how.endswith("iterated"):
        async for _ in _events_async(fetcher):
            count += 1
            if count >= events:
                break
    else:
        while count < events:
            await next_event(fetcher)
            count += 1
    row.update(events=count, seconds=time.perf_counter() - began, cpu=time.process_time() - used)
    running = False
    if probed:
        await prober
        row["lag_ms"] = _percentiles(lags)
    await fetcher.aclose()
    await client.aclose()


def _percentiles(lags: list[float]) -> dict[str, float]:
    """How late the probe woke (ms): p50, p99, max, and how many probes."""
    ms = sorted(lag * 1000 for lag in lags)
    return {
        "probes": len(ms),
        "p50": round(statistics.median(ms), 3),
        "p99": round(ms[int(len(ms) * 0.99)], 3),
        "max": round(ms[-1], 3),
    }


def _path(url: str, scope: str, group: str, how: str, events: int, start: Any, out: Any) -> None:
    connection = RedisConnection.from_url(url)
    row: dict[str, Any] = {"start": start}
    if how.startswith("async"):
        asyncio.run(_async_fetcher(url, connection, scope, events, how, row))
    elif how.startswith("sync"):
        row["start"] = _Started(start, row)
        iterated = how.endswith("iterated")
        row["events"] = _sync_fetcher(connection, scope, events, iterated, row["start"])
        seconds, cpu = time.perf_counter() - row["began"], time.process_time() - row["used"]
        row.update(seconds=seconds, cpu=cpu)
    else:
        with EventStreamClientFactory.from_url(scope, url) as factory:
            reader = factory.create_reader("r", group, BytesSerializer(), ReaderConfig())
            reader.read_batch(1, timeout=5.0)  # joined, the segment acquired
            start.wait()
            began, used = time.perf_counter(), time.process_time()
            count = 1
            while count < events and reader.read_next_event(timeout=5.0).event is not None:
                count += 1
            row.update(
                events=count, seconds=time.perf_counter() - began, cpu=time.process_time() - used
            )
            reader.close()
    connection.close()
    del row["start"]
    out.put(row)


class _Started:
    """The start event, noting when the wait for it ended (the clock starts there)."""

    def __init__(self, start: Any, row: dict[str, Any]) -> None:
        self._start, self._row = start, row

    def wait(self) -> None:
        self._start.wait()
        self._row.update(began=time.perf_counter(), used=time.process_time())


def measure(url: str, events: int, repeat: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    scope = f"b{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s")
    _write(url, scope, "s", events)
    best: dict[str, dict[str, Any]] = {}
    with ReaderGroupManager.from_url(scope, url) as rgm:
        for round_ in range(repeat):
            for how in PATHS:
                group = f"g{round_}-{how}"
                rgm.create_reader_group(group, ReaderGroupConfig(streams=[f"{scope}/s"]))
                (row,) = run_processes(_path, [(url, scope, group, how, events)])
                assert row["events"] >= events, (how, row)
                row["rate"] = row["events"] / row["seconds"]
                row["cpu_rate"] = row["events"] / row["cpu"]
                if how not in best or row["rate"] > best[how]["rate"]:
                    best[how] = row
    rate = {how: best[how]["rate"] for how in PATHS}
    cpu = {how: best[how]["cpu_rate"] for how in PATHS}
    return {
        "events": events,
        "repeat": repeat,
        "load_average_1m": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)},
        "events_per_s": {how: round(value) for how, value in rate.items()},
        "events_per_client_cpu_s": {how: round(value) for how, value in cpu.items()},
        "ratios": {
            "async_fetcher_vs_sync_fetcher": round(rate["async_fetcher"] / rate["sync_fetcher"], 2),
            "async_fetcher_vs_sync_fetcher_by_cpu": round(
                cpu["async_fetcher"] / cpu["sync_fetcher"], 2
            ),
            "async_iterated_vs_sync_iterated": round(
                rate["async_fetcher_iterated"] / rate["sync_fetcher_iterated"], 2
            ),
            "async_iterated_vs_sync_iterated_by_cpu": round(
                cpu["async_fetcher_iterated"] / cpu["sync_fetcher_iterated"], 2
            ),
            "sync_fetcher_vs_read_next_event": round(
                rate["sync_fetcher"] / rate["read_next_event"], 2
            ),
        },
        "loop_lag_ms": {
            how: {
                "idle_loop_first": best[how]["idle_lag_ms"],
                "while_delivering": best[how]["lag_ms"],
                "events_per_s": round(rate[how]),
            }
            for how in ("async_fetcher_probed", "async_fetcher_probed_50k")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with redis_server() as server:
        emit("aio_read_path", measure(server.url, args.events, args.repeat))


if __name__ == "__main__":
    main()
