"""A replicated counter shared by several processes through a State Synchronizer.

Runs against the embedded default Redis (``REDIS_URL`` if set). Four worker processes each
add to a shared counter with conditional updates while a fifth compacts the log; at the end a
fresh client loads the state from the snapshot and the total is checked exactly.

    python examples/statesync_counter.py [--workers 4] [--updates 250]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from readergroup.testing.embedded_redis import redis_server
from statesync import StateSynchronizer, Update


@dataclass(frozen=True)
class Add(Update):
    worker: int
    amount: int

    def apply_to(self, state: dict[str, Any]) -> dict[str, Any]:
        per_worker = dict(state["per_worker"])
        per_worker[self.worker] = per_worker.get(self.worker, 0) + self.amount
        return {"total": state["total"] + self.amount, "per_worker": per_worker}


def worker(url: str, name: str, index: int, updates: int, out: Any) -> None:
    with StateSynchronizer.from_url(url, name, update_types=[Add]) as sync:
        sync.fetch_updates()
        for _ in range(updates):
            sync.update_state(lambda state: [Add(index, 1)])
        out.put((index, sync.stats.appends, sync.stats.conflicts))


def compactor(url: str, name: str, stop: Any, out: Any) -> None:
    compactions = 0
    with StateSynchronizer.from_url(url, name, update_types=[Add]) as sync:
        sync.fetch_updates()
        while not stop.is_set():
            if sync.wait_for_updates(0.1) and sync.compact().compacted:
                compactions += 1
    out.put(("compactor", compactions))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--updates", type=int, default=250)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    name = f"demo-counter-{uuid.uuid4().hex[:6]}"
    with redis_server() as server:
        print(f"Redis: {server.url} ({server.kind})")
        with StateSynchronizer.from_url(server.url, name, update_types=[Add]) as sync:
            sync.initialize({"total": 0, "per_worker": {}})
        out, stop = ctx.Queue(), ctx.Event()
        began = time.perf_counter()
        workers = [
            ctx.Process(target=worker, args=(server.url, name, i, args.updates, out))
            for i in range(args.workers)
        ]
        background = ctx.Process(target=compactor, args=(server.url, name, stop, out))
        for proc in [*workers, background]:
            proc.start()
        reports = [out.get(timeout=120) for _ in workers]
        stop.set()
        compactions = out.get(timeout=30)[1]
        for proc in [*workers, background]:
            proc.join(30)
        elapsed = time.perf_counter() - began
        print(f"{'worker':>6} {'appends':>8} {'conflicts':>9}")
        for index, appends, conflicts in sorted(reports):
            print(f"{index:>6} {appends:>8} {conflicts:>9}")
        with StateSynchronizer.from_url(server.url, name, update_types=[Add]) as fresh:
            fresh.fetch_updates()
            expected = args.workers * args.updates
            print(
                f"total={fresh.state['total']} expected={expected} revision={fresh.revision} "
                f"compactions={compactions} snapshots_loaded={fresh.stats.snapshots_loaded} "
                f"({expected / elapsed:.0f} updates/s)"
            )
            ok = fresh.state["total"] == expected and all(
                fresh.state["per_worker"][i] == args.updates for i in range(args.workers)
            )
            fresh.delete()
    print("VERIFIED: every update applied exactly once" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
