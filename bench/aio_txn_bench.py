"""asyncio transactions benchmark (issue 29): the asyncio transactional writer against the
threaded one.

Against one private server (nothing else talks to it), each path alone in its own process
(spawned one after the other, never two at once), each into a fresh 4-segment stream, the same
events (``--size`` bytes, routing keys ``k0..k999``), the paths alternated ``--repeat`` times
and the median kept:

* ``sync_small`` / ``async_small``: ``--small`` transactions of 10 events, one after the other
  from one writer (``begin``, ``write_event`` x 10, ``commit``; awaited on the asyncio one):
  commits/s over the whole loop, each ``commit()``'s latency (p50, p99), and the client
  process's CPU milliseconds per transaction;
* ``sync_large`` / ``async_large``: ``--events`` events in transactions of 1,000: events/s and
  CPU ms per 1,000 events.

Ratios: async over sync (rates: >= 1 is the asyncio writer as fast or faster; latency and
CPU: <= 1 is it quicker or cheaper). The machine's load average is reported. Prints JSON.
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
from bench.txn_bench import new_stream, payloads
from readergroup import BytesSerializer, EventStreamClientFactory
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.client.transactions import TransactionalWriterConfig
from readergroup.testing.embedded_redis import local_redis_server

PATHS = ("sync_small", "async_small", "sync_large", "async_large")


def _config() -> TransactionalWriterConfig:
    return TransactionalWriterConfig(transactional_id=f"bench-{uuid.uuid4().hex[:6]}")


def _sync(url: str, scope: str, stream: str, events: list[tuple[bytes, str]], per: int) -> Any:
    """Commit ``events`` in transactions of ``per``: (each commit's seconds, loop seconds,
    CPU seconds)."""
    commits: list[float] = []
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_transactional_writer(stream, BytesSerializer(), _config())
        cpu, began = time.process_time(), time.perf_counter()
        for start in range(0, len(events), per):
            txn = writer.begin()
            for payload, key in events[start : start + per]:
                txn.write_event(payload, routing_key=key)
            before = time.perf_counter()
            txn.commit()
            commits.append(time.perf_counter() - before)
        return commits, time.perf_counter() - began, time.process_time() - cpu


async def _async(
    url: str, scope: str, stream: str, events: list[tuple[bytes, str]], per: int
) -> Any:
    commits: list[float] = []
    async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
        writer = await factory.create_transactional_writer(stream, BytesSerializer(), _config())
        cpu, began = time.process_time(), time.perf_counter()
        for start in range(0, len(events), per):
            txn = await writer.begin()
            for payload, key in events[start : start + per]:
                await txn.write_event(payload, routing_key=key)
            before = time.perf_counter()
            await txn.commit()
            commits.append(time.perf_counter() - before)
        return commits, time.perf_counter() - began, time.process_time() - cpu


def one_path(path: str, url: str, options: dict[str, Any], start: Any, results: Any) -> None:
    """Run one path in this (spawned) process; puts (path, figures) on ``results``."""
    small = path.endswith("small")
    count = options["small"] * 10 if small else options["events"]
    events = payloads(count, options["size"])
    per = 10 if small else 1000
    scope, stream = new_stream(url)
    start.wait()
    if path.startswith("sync"):
        commits, seconds, cpu = _sync(url, scope, stream, events, per)
    else:
        commits, seconds, cpu = asyncio.run(_async(url, scope, stream, events, per))
    commits.sort()
    if small:
        figures = {
            "commits_per_s": len(commits) / seconds,
            "commit_ms_p50": 1000 * commits[len(commits) // 2],
            "commit_ms_p99": 1000 * commits[int(len(commits) * 0.99)],
            "cpu_ms_per_txn": 1000 * cpu / len(commits),
        }
    else:
        figures = {"events_per_s": count / seconds, "cpu_ms_per_1000": 1000 * cpu / count * 1000}
    results.put((path, figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--small", type=int, default=1000, help="10-event transactions")
    parser.add_argument("--repeat", type=int, default=3, help="median of this many runs")
    args = parser.parse_args()
    options = {"events": args.events, "size": args.size, "small": args.small}
    runs: dict[str, list[dict[str, float]]] = {path: [] for path in PATHS}
    with local_redis_server() as server:
        for _ in range(args.repeat):
            for path in PATHS:
                ((_, figures),) = run_processes(one_path, [(path, server.url, options)])
                runs[path].append(figures)
    medians = {
        path: {name: round(median([r[name] for r in got]), 3) for name in got[0]}
        for path, got in runs.items()
    }
    ratios = {
        mode: {
            name: round(medians[f"async_{mode}"][name] / medians[f"sync_{mode}"][name], 2)
            for name in medians[f"sync_{mode}"]
        }
        for mode in ("small", "large")
    }
    emit(
        "aio_txn_bench",
        {
            "options": options,
            "median_of": args.repeat,
            "load_average": os.getloadavg(),
            "paths": medians,
            "async_over_sync": ratios,
        },
    )


if __name__ == "__main__":
    main()
