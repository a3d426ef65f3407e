"""Checkpoint completion on a busy group (issue 28): 4 readers, each with a backlog of 100,000
events of its own segment, processing 1 ms per event; checkpoints initiated one after another.
Reports each checkpoint's completion time (initiation to the last acknowledgement) and the
events each reader handed out between initiation and the checkpoint, against the goal
``group_refresh_time`` + 200 ms at p99.

Run: ``python bench/checkpoint_bench.py [--readers 4] [--backlog 100000] [--checkpoints 20]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import emit, median
from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.testing.embedded_redis import redis_server


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(url: str, readers: int, backlog: int, checkpoints: int, refresh: float) -> Any:
    with StreamManager.from_url(url) as manager:
        manager.create_scope("cpb")
        manager.create_stream(
            "cpb", "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(readers))
        )
    with EventStreamClientFactory.from_url("cpb", url) as factory:
        with factory.create_event_writer("s", BytesSerializer()) as writer:
            payload = b"x" * 64
            for i in range(backlog * readers):
                writer.write_event(payload, routing_key=f"k{i % 997}")
            writer.flush()
        rgm = ReaderGroupManager.from_url("cpb", url)
        rgm.create_reader_group(
            "g",
            ReaderGroupConfig(
                streams=["cpb/s"], group_refresh_time=refresh, heartbeat_interval=3.0
            ),
        )
        group = rgm.get_reader_group("g")
        stop = threading.Event()
        initiated_at: dict[str, float] = {}
        handed_at: dict[str, list[float]] = {}
        events_after: dict[str, list[int]] = {}
        lock = threading.Lock()

        def consume(name: str) -> None:
            reader = factory.create_reader(name, "g", BytesSerializer())
            since: dict[str, int] = {}
            try:
                while not stop.is_set():
                    event = reader.read_next_event(timeout=0.1)
                    if event.is_checkpoint:
                        with lock:
                            cp = event.checkpoint_name or ""
                            handed_at.setdefault(cp, []).append(time.monotonic())
                            events_after.setdefault(cp, []).append(since.pop(cp, 0))
                    elif event.event is not None:
                        with lock:
                            for cp in initiated_at:
                                if cp not in handed_at or len(handed_at[cp]) < readers:
                                    since[cp] = since.get(cp, 0) + 1
                        time.sleep(0.001)  # the application's work
            finally:
                reader.close()

        threads = [threading.Thread(target=consume, args=(f"r{i}",)) for i in range(readers)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(group.get_online_readers()) < readers and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # every reader busy with its backlog
        completions: list[float] = []
        failures = 0
        load = os.getloadavg()[0]
        for i in range(checkpoints):
            name = f"cp{i}"
            began = time.monotonic()
            with lock:
                initiated_at[name] = began
            try:
                group.initiate_checkpoint(name, timeout=30)
                completions.append(time.monotonic() - began)
            except Exception:
                failures += 1
            time.sleep(0.2)
        stop.set()
        for thread in threads:
            thread.join(30)
        rgm.close()
    after = [n for cp in events_after.values() for n in cp]
    return {
        "readers": readers,
        "backlog_per_reader": backlog,
        "group_refresh_time_s": refresh,
        "checkpoints": checkpoints,
        "failed": failures,
        "completion_s": {
            "p50": round(median(completions), 3),
            "p99": round(_percentile(completions, 0.99), 3) if completions else None,
            "max": round(max(completions), 3) if completions else None,
        },
        "goal_p99_s": round(refresh + 0.2, 3),
        "events_handed_out_after_initiation": {
            "median": median([float(n) for n in after]),
            "max": max(after) if after else None,
        },
        "load_average_1m": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--checkpoints", type=int, default=20)
    parser.add_argument("--group-refresh-time", type=float, default=0.5)
    args = parser.parse_args()
    with redis_server() as server:
        emit(
            "checkpoint",
            measure(
                server.url,
                args.readers,
                args.backlog,
                args.checkpoints,
                args.group_refresh_time,
            ),
        )


if __name__ == "__main__":
    main()
