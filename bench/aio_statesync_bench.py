"""The asyncio State Synchronizer against the threaded one, on the same server in one run.

Each path runs alone in a process of its own (spawned, released together with nobody else):

* ``one_client``: one synchronizer doing conditional ``update_state(Add(1))`` back to back for
  ``--seconds``: per-call latency p50/p99 (ms) and updates/s, threaded
  (:class:`StateSynchronizer` on redis-py) against asyncio (:class:`AsyncStateSynchronizer`
  on ``redis.asyncio``); ``ratio`` = async / threaded (updates/s; latency: threaded / async, so
  above 1 is better for async in both).
* ``client_baseline``: the same, for a bare ``PING`` of redis-py against ``redis.asyncio``
  (what the client library alone costs: the ``one_client`` ratio is to be read against it).
* ``many_clients``: ``--clients`` synchronizers in one process, each on a log of its own (no
  conflicts: how one process carries many clients), as that many threads against as many
  tasks of one event loop; total updates/s and per-call p50/p99.

Usage: ``python bench/aio_statesync_bench.py [--seconds 3] [--clients 16] [--rounds 3]``.
Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
import redis.asyncio as aioredis

from bench.common import emit, median, run_processes
from readergroup.testing.embedded_redis import redis_server
from statesync import AsyncStateSynchronizer, StateSynchronizer
from tests.support.model import Add


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _summary(latencies: list[float], seconds: float) -> dict[str, float]:
    return {
        "updates_per_s": len(latencies) / seconds,
        "p50_ms": _percentile(latencies, 0.50) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
    }


def _threaded(url: str, names: list[str], seconds: float, start: Any, results: Any) -> None:
    syncs = [StateSynchronizer.from_url(url, name, update_types=[Add]) for name in names]
    for sync in syncs:
        sync.fetch_updates()
    latencies: list[list[float]] = [[] for _ in syncs]
    start.wait()
    deadline = time.perf_counter() + seconds

    def run(sync: StateSynchronizer[Any], out: list[float]) -> None:
        while (began := time.perf_counter()) < deadline:
            sync.update_state(lambda s: [Add(1)])
            out.append(time.perf_counter() - began)

    threads = [
        threading.Thread(target=run, args=pair) for pair in zip(syncs, latencies, strict=True)
    ]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    results.put(_summary([x for out in latencies for x in out], elapsed))
    for sync in syncs:
        sync.close()


def _asynchronous(url: str, names: list[str], seconds: float, start: Any, results: Any) -> None:
    async def main() -> dict[str, float]:
        syncs = [AsyncStateSynchronizer.from_url(url, name, update_types=[Add]) for name in names]
        for sync in syncs:
            await sync.fetch_updates()
        latencies: list[list[float]] = [[] for _ in syncs]
        await asyncio.to_thread(start.wait)
        deadline = time.perf_counter() + seconds

        async def run(sync: AsyncStateSynchronizer[Any], out: list[float]) -> None:
            while (began := time.perf_counter()) < deadline:
                await sync.update_state(lambda s: [Add(1)])
                out.append(time.perf_counter() - began)

        began = time.perf_counter()
        await asyncio.gather(*(run(s, out) for s, out in zip(syncs, latencies, strict=True)))
        elapsed = time.perf_counter() - began
        for sync in syncs:
            await sync.close()
        return _summary([x for out in latencies for x in out], elapsed)

    results.put(asyncio.run(main()))


def _ping_threaded(url: str, names: list[str], seconds: float, start: Any, results: Any) -> None:
    client = redis.Redis.from_url(url)
    client.ping()
    start.wait()
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while (began := time.perf_counter()) < deadline:
        client.ping()
        latencies.append(time.perf_counter() - began)
    results.put(_summary(latencies, seconds))


def _ping_asynchronous(
    url: str, names: list[str], seconds: float, start: Any, results: Any
) -> None:
    async def main() -> dict[str, float]:
        client = aioredis.Redis.from_url(url)
        await client.ping()
        await asyncio.to_thread(start.wait)
        latencies: list[float] = []
        deadline = time.perf_counter() + seconds
        while (began := time.perf_counter()) < deadline:
            await client.ping()
            latencies.append(time.perf_counter() - began)
        await client.aclose()
        return _summary(latencies, seconds)

    results.put(asyncio.run(main()))


def _measure(
    url: str, clients: int, seconds: float, rounds: int, paths: tuple[Any, Any]
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"threaded": [], "asyncio": []}
    for _ in range(rounds):  # alternate the paths, each alone in its own process
        for path, target in zip(("threaded", "asyncio"), paths, strict=True):
            names = [f"bench-aio-{uuid.uuid4().hex[:8]}" for _ in range(clients)]
            for name in names:
                StateSynchronizer.from_url(url, name, update_types=[Add]).initialize({"total": 0})
            [row] = run_processes(target, [(url, names, seconds)])
            runs[path].append(row)
    table: dict[str, Any] = {
        path: {key: round(median([r[key] for r in rows]), 3) for key in rows[0]}
        for path, rows in runs.items()
    }
    threaded, asynchronous = table["threaded"], table["asyncio"]
    table["ratio_updates_per_s"] = round(
        asynchronous["updates_per_s"] / threaded["updates_per_s"], 2
    )
    table["ratio_p50"] = round(threaded["p50_ms"] / asynchronous["p50_ms"], 2)
    table["ratio_p99"] = round(threaded["p99_ms"] / asynchronous["p99_ms"], 2)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with redis_server() as server:
        synchronizers = (_threaded, _asynchronous)
        results = {
            "one_client": _measure(server.url, 1, args.seconds, args.rounds, synchronizers),
            "client_baseline": _measure(
                server.url, 1, args.seconds, args.rounds, (_ping_threaded, _ping_asynchronous)
            ),
            "many_clients": {
                "clients": args.clients,
                **_measure(server.url, args.clients, args.seconds, args.rounds, synchronizers),
            },
        }
    emit("aio_statesync", results)


if __name__ == "__main__":
    main()
