"""State Synchronizer benchmark: contention throughput, catch-up, wake-up latency.

Everything is measured in one run against the same server, with the baselines beside it:

* ``contention``: conditional ``update_state(Add(1))`` per second with 1, 4 and 16 client
  processes, against the same counter done naively with redis-py ``WATCH/GET/MULTI/SET/EXEC``
  read-modify-write (msgpack state, retry on ``WatchError``); ``ratio`` = ours / baseline.
* ``catch_up``: a fresh client loading a 100k-entry history, without and with a compaction,
  against a raw ``XRANGE COUNT 1000`` scan of the same log stream (no decoding);
  ``ratio`` = raw seconds / our seconds (1.0 would mean decoding and applying were free).
* ``wake``: milliseconds from another client's append to ``wait_for_updates`` returning.

Usage: ``python bench/statesync_bench.py [--seconds 3] [--history 100000]``. Prints JSON.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgpack
import redis

from bench.common import emit, median, run_processes
from readergroup.testing.embedded_redis import redis_server
from statesync import RetryPolicy, StateSynchronizer, SyncConfig
from statesync.redis_backend import RedisLogBackend
from statesync.scripts import script_source
from tests.support.model import Add

PATIENT = SyncConfig(retry=RetryPolicy(max_attempts=100_000, deadline=600.0))


def _ours(url: str, name: str, seconds: float, start: Any, results: Any) -> None:
    sync = StateSynchronizer.from_url(url, name, update_types=[Add], config=PATIENT)
    sync.fetch_updates()
    start.wait()
    done, deadline = 0, time.perf_counter() + seconds
    began = time.perf_counter()
    while time.perf_counter() < deadline:
        sync.update_state(lambda s: [Add(1)])
        done += 1
    results.put(
        {"updates": done, "seconds": time.perf_counter() - began, "conflicts": sync.stats.conflicts}
    )
    sync.close()


def _watch_multi_exec(url: str, key: str, seconds: float, start: Any, results: Any) -> None:
    client = redis.Redis.from_url(url)
    start.wait()
    done, conflicts, deadline = 0, 0, time.perf_counter() + seconds
    began = time.perf_counter()
    while time.perf_counter() < deadline:
        with client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    state = msgpack.unpackb(pipe.get(key))
                    pipe.multi()
                    pipe.set(key, msgpack.packb({**state, "total": state["total"] + 1}))
                    pipe.execute()
                    break
                except redis.WatchError:
                    conflicts += 1
        done += 1
    results.put({"updates": done, "seconds": time.perf_counter() - began, "conflicts": conflicts})
    client.close()


def _rate(rows: list[dict[str, Any]]) -> tuple[float, int]:
    seconds = max(row["seconds"] for row in rows)
    return sum(row["updates"] for row in rows) / seconds, sum(row["conflicts"] for row in rows)


def contention(url: str, seconds: float) -> list[dict[str, Any]]:
    table = []
    for clients in (1, 4, 16):
        name = f"bench-{uuid.uuid4().hex[:8]}"
        StateSynchronizer.from_url(url, name, update_types=[Add]).initialize({"total": 0})
        ours, our_conflicts = _rate(run_processes(_ours, [(url, name, seconds)] * clients))
        key = f"bench-baseline:{name}"
        redis.Redis.from_url(url).set(key, msgpack.packb({"total": 0}))
        base, base_conflicts = _rate(
            run_processes(_watch_multi_exec, [(url, key, seconds)] * clients)
        )
        table.append(
            {
                "clients": clients,
                "statesync_updates_per_s": round(ours),
                "statesync_conflicts": our_conflicts,
                "watch_multi_exec_updates_per_s": round(base),
                "watch_multi_exec_conflicts": base_conflicts,
                "ratio": round(ours / base, 2),
            }
        )
    return table


def _seed_history(url: str, name: str, entries: int) -> None:
    """Append ``entries`` Add(1) entries fast, through the real append script, pipelined."""
    sync = StateSynchronizer.from_url(url, name, update_types=[Add])
    sync.initialize({"total": 0})
    sync.update_state(lambda s: [Add(1)])  # one real append to get an encoded payload
    payload = sync.backend.read(name, 0, 1).entries[0].payload  # type: ignore[attr-defined]
    backend: RedisLogBackend = sync.backend  # type: ignore[assignment]
    keys = backend.keys(name)
    client = backend.client
    append = client.register_script(script_source("append"))
    for first in range(2, entries + 1, 1000):
        pipe = client.pipeline(transaction=False)
        for sequence in range(first, min(first + 1000, entries + 1)):
            append(
                keys=[keys.meta, keys.log, keys.writers],
                args=[-1, payload, 1 << 20, "seeder", sequence],
                client=pipe,
            )
        pipe.execute()
    sync.close()


def _time_fresh_fetch(url: str, name: str) -> tuple[float, int]:
    sync = StateSynchronizer.from_url(url, name, update_types=[Add])
    began = time.perf_counter()
    sync.fetch_updates()
    elapsed = time.perf_counter() - began
    total = sync.state["total"]
    sync.close()
    return elapsed, total


def _time_raw_scan(url: str, name: str) -> float:
    client = redis.Redis.from_url(url)
    log = RedisLogBackend(client).keys(name).log
    began = time.perf_counter()
    last, count = "-", 0
    while True:
        page = client.xrange(log, min=last, max="+", count=1000)
        if last != "-":
            page = page[1:] if page and page[0][0].decode() == last else page
        if not page:
            break
        count += len(page)
        last = page[-1][0].decode()
        if len(page) < 999:
            break
    elapsed = time.perf_counter() - began
    client.close()
    return elapsed


def catch_up(url: str, history: int) -> dict[str, Any]:
    name = f"bench-history-{uuid.uuid4().hex[:8]}"
    _seed_history(url, name, history)
    raw = _time_raw_scan(url, name)
    without, total = _time_fresh_fetch(url, name)
    assert total == history, (total, history)
    compactor = StateSynchronizer.from_url(url, name, update_types=[Add])
    compactor.fetch_updates()
    compactor.compact()
    compactor.close()
    with_compaction, total = _time_fresh_fetch(url, name)
    assert total == history
    return {
        "entries": history,
        "raw_xrange_scan_s": round(raw, 3),
        "fresh_client_without_compaction_s": round(without, 3),
        "fresh_client_with_compaction_s": round(with_compaction, 4),
        "entries_per_s_without_compaction": round(history / without),
        "ratio_raw_scan_to_ours_without_compaction": round(raw / without, 2),
        "speedup_from_compaction": round(without / with_compaction, 1),
    }


def _wait_and_stamp(sync: StateSynchronizer[Any], ready: threading.Event, out: list[float]) -> None:
    ready.set()
    sync.wait_for_updates(10.0)
    out.append(time.perf_counter())


def wake_latency(url: str, rounds: int = 200) -> dict[str, Any]:
    name = f"bench-wake-{uuid.uuid4().hex[:8]}"
    waiter = StateSynchronizer.from_url(url, name, update_types=[Add])
    writer = StateSynchronizer.from_url(url, name, update_types=[Add])
    waiter.initialize({"total": 0})
    writer.fetch_updates()
    latencies: list[float] = []
    for _ in range(rounds):
        woke: list[float] = []
        ready = threading.Event()
        thread = threading.Thread(target=_wait_and_stamp, args=(waiter, ready, woke))
        thread.start()
        ready.wait()
        time.sleep(0.002)  # let the waiter block in XREAD
        appended = time.perf_counter()
        writer.update_state(lambda s: [Add(1)])
        thread.join()
        latencies.append((woke[0] - appended) * 1000)
        waiter.fetch_updates()
    waiter.close()
    writer.close()
    ordered = sorted(latencies)
    return {
        "rounds": rounds,
        "median_ms": round(median(latencies), 3),
        "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per contention measurement")
    parser.add_argument("--history", type=int, default=100_000, help="entries for catch-up")
    args = parser.parse_args()
    with redis_server() as server:
        emit(
            "statesync",
            {
                "server": server.kind,
                "contention": contention(server.url, args.seconds),
                "catch_up": catch_up(server.url, args.history),
                "wake": wake_latency(server.url),
            },
        )


if __name__ == "__main__":
    main()
