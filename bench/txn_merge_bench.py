"""Merge benchmark (issue 31 review): how long Redis is blocked while the Spark sink's driver
merges a large job's task transactions into the job's.

In one run, against one private server, each path alone in its own spawned process, one after
the other, each on a fresh stream: ``--tasks`` transactions of ``--events`` events of
``--size`` bytes are staged (1,000 events per staging item, as the sink's tasks do), then
merged while a second connection PINGs the server in a loop:

* ``one_call``: the whole merge in one ``txn_merge.lua`` call (the step budget unbounded: what
  the merge did before it was cut in steps): the baseline;
* ``steps``: ``TxnStore.merge`` (steps of at most ``MERGE_STEP_ITEMS`` items /
  ``MERGE_STEP_BYTES`` bytes).

Figures per path: the merge's wall time, script calls, the longest PING round trip during the
merge (how long another client waited: a heartbeat, a read), and the ratio of ``steps``'
longest PING over ``one_call``'s. Prints JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import emit, run_processes
from readergroup.core.transactions import MERGE_STEP_BYTES, MERGE_STEP_ITEMS
from readergroup.storage.connection import RedisConnection
from readergroup.testing.embedded_redis import local_redis_server

STAGE_EVENTS = 1000


def stage(connection: RedisConnection, scope: str, options: dict[str, Any]) -> list[str]:
    store = connection.transactions(scope, "s")
    epoch = store.next_epoch("job")
    payload = b"x" * options["size"]
    sources = []
    for task in range(options["tasks"]):
        txn_id = f"task-{task}"
        store.begin(txn_id, "job", epoch, 3_600_000, 3_600_000)
        chunk = [(f"k{i % 1000}", payload, 0, b"") for i in range(STAGE_EVENTS)]
        for _ in range(options["events"] // STAGE_EVENTS):
            store.stage(txn_id, f"{epoch}:job", chunk, 3_600_000)
        sources.append(txn_id)
    return sources


def one_path(path: str, url: str, options: dict[str, Any], start: Any, results: Any) -> None:
    connection = RedisConnection.from_url(url)
    scope = f"b{uuid.uuid4().hex[:8]}"
    store = connection.transactions(scope, "s")
    sources = stage(connection, scope, options)
    epoch = store.epoch("job")
    start.wait()
    pinger = redis.Redis.from_url(url)
    longest = [0.0]
    stop = threading.Event()

    def ping() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            pinger.ping()
            longest[0] = max(longest[0], time.perf_counter() - began)

    thread = threading.Thread(target=ping)
    thread.start()
    calls = 0
    began = time.perf_counter()
    if path == "one_call":
        step = store.merge_step(
            "target", sources, "job", epoch, 3_600_000, 3_600_000, 1 << 40, 1 << 60
        )
        calls = 1
        assert step.state == "OPEN", step
    else:
        step = store.merge_step("target", sources, "job", epoch, 3_600_000, 3_600_000)
        calls = 1
        while step.state == "MERGING":
            step = store.merge_step("target", sources, "job", epoch, 3_600_000, 3_600_000)
            calls += 1
    elapsed = time.perf_counter() - began
    stop.set()
    thread.join()
    events = store.record("target").events  # type: ignore[union-attr]
    store.delete_all()
    pinger.close()
    connection.close()
    results.put(
        (
            path,
            {
                "merge_s": round(elapsed, 3),
                "script_calls": calls,
                "events": events,
                "longest_ping_ms": round(longest[0] * 1000, 1),
            },
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200)
    options = vars(parser.parse_args())
    figures: dict[str, Any] = {
        "options": options,
        "step": {"items": MERGE_STEP_ITEMS, "bytes": MERGE_STEP_BYTES},
        "load_average": os.getloadavg()[0],
    }
    with local_redis_server() as server:
        for path in ("one_call", "steps"):
            ((_, result),) = run_processes(one_path, [(path, server.url, options)])
            figures[path] = result
    figures["longest_ping_ratio_steps_over_one_call"] = round(
        figures["steps"]["longest_ping_ms"] / max(figures["one_call"]["longest_ping_ms"], 0.1), 4
    )
    emit("txn_merge", figures)


if __name__ == "__main__":
    main()
