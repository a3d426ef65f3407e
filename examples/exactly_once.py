"""Exactly-once per-key totals with checkpoints, surviving a crash.

Two readers sum ``amount`` per key. At every checkpoint each reader saves its partial totals
in Redis under the checkpoint's name, together with nothing else: the checkpoint's positions
say exactly which events those totals contain. Then the application "crashes" (its readers stop
without saving anything further). On restart it resets the group to the last completed
checkpoint, loads the totals saved for it, and reads on: every event counted exactly once.

    python examples/exactly_once.py [--events 3000]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from readergroup import (
    EventStreamClientFactory,
    JsonSerializer,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.testing.embedded_redis import redis_server

TIMING = {
    "heartbeat_interval": 0.3,
    "session_timeout": 2.0,
    "group_refresh_time": 0.05,
    "auto_commit_interval": 0.1,
}


class Worker(threading.Thread):
    """One reader keeping partial totals; saves them at each checkpoint event."""

    def __init__(
        self, factory: EventStreamClientFactory, store: redis.Redis, name: str, tag: str
    ) -> None:
        super().__init__(name=name)
        self.reader = factory.create_reader(name, "totals", JsonSerializer())
        self.store, self.tag = store, tag
        self.totals: Counter[str] = Counter()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for event in self.reader.read_batch(100, timeout=0.1):
                if event.is_checkpoint:  # save exactly what this reader has counted so far
                    key = f"{self.tag}:totals:{event.checkpoint_name}"
                    self.store.hset(key, self.name, json.dumps(dict(self.totals)))
                else:
                    self.totals[event.event["key"]] += event.event["amount"]

    def crash(self) -> None:
        self.stop.set()
        self.join(10)
        self.reader._stop.set()


def saved_totals(store: redis.Redis, tag: str, checkpoint: str) -> Counter[str]:
    totals: Counter[str] = Counter()
    for part in store.hgetall(f"{tag}:totals:{checkpoint}").values():
        totals.update(json.loads(part))
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    args = parser.parse_args()
    scope, tag = f"eo{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:6]
    with redis_server() as server:
        url = server.url
        store = redis.Redis.from_url(url)
        with StreamManager.from_url(url) as sm:
            sm.create_scope(scope)
            sm.create_stream(
                scope, "payments", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
            )
        expected: Counter[str] = Counter()
        factory = EventStreamClientFactory.from_url(scope, url)
        writer = factory.create_event_writer("payments", JsonSerializer())

        def write(count: int) -> None:
            for i in range(count):
                key, amount = f"customer-{i % 20}", i % 7 + 1
                writer.write_event({"key": key, "amount": amount}, routing_key=key)
                expected[key] += amount
            writer.flush()

        with ReaderGroupManager.from_url(scope, url) as rgm:
            rgm.create_reader_group(
                "totals", ReaderGroupConfig(streams=[f"{scope}/payments"], **TIMING)
            )
            group = rgm.get_reader_group("totals")
        workers = [Worker(factory, store, f"w{i}", tag) for i in range(2)]
        for worker in workers:
            worker.start()
        write(args.events // 3)
        checkpoint = group.initiate_checkpoint("cp-1", timeout=30)
        write(args.events // 3)  # counted in memory after cp-1, then lost in the crash
        for worker in workers:
            worker.crash()
        counted = sum(checkpoint.positions.values())
        print(f"crashed after checkpoint {checkpoint.name} at {counted} events")

        # restart: the old instances are gone; back to the last checkpoint and its totals
        for name in ("w0", "w1"):
            group.reader_offline(name)
        group.reset_reader_group(start=checkpoint)
        restored = saved_totals(store, tag, checkpoint.name)
        workers = [Worker(factory, store, f"w{i}", tag) for i in range(2)]
        for worker in workers:
            worker.start()
        write(args.events - 2 * (args.events // 3))
        deadline = time.monotonic() + 60
        while group.get_metrics().total.events and time.monotonic() < deadline:
            time.sleep(0.05)  # wait until the group has committed everything
        final = group.initiate_checkpoint("cp-2", timeout=30)
        for worker in workers:
            worker.stop.set()
            worker.join(10)
            worker.reader.close()
        total = restored + saved_totals(store, tag, final.name)
        writer.close()
        factory.close()
        ok = total == expected
        print(f"keys={len(expected)} events={args.events} exact={ok}")
        print(
            "VERIFIED: every event counted exactly once" if ok else f"MISMATCH {total - expected}"
        )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
