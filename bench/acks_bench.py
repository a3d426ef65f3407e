"""Ack-mode benchmark: writer throughput with acks=replicas=1 and acks=fsync against leader.

In one run, against one primary (``appendonly yes``, ``appendfsync everysec``, the Redis
default for AOF) with one replica following it, the same events (``--events`` of ``--size``
bytes, routing keys ``k0..k999``) are written by ``EventStreamWriter`` into a fresh
one-segment stream per mode; ``ratio`` = the mode's events per second / leader's. Each
measurement is the best of ``--repeat`` runs. Usage:
``python bench/acks_bench.py [--events 50000] [--size 100] [--repeat 3]``. Prints JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import emit
from readergroup import BytesSerializer, ClientConfig, EventStreamClientFactory, StreamManager
from readergroup.testing.embedded_redis import local_redis_server

MODES = ("leader", "replicas=1", "fsync")


def write_all(url: str, scope: str, stream: str, acks: str, payloads: list[bytes]) -> float:
    keys = [f"k{i % 1000}" for i in range(len(payloads))]
    with EventStreamClientFactory.from_url(scope, url, ClientConfig(acks=acks)) as factory:
        writer = factory.create_event_writer(stream, BytesSerializer())
        began = time.perf_counter()
        for payload, key in zip(payloads, keys, strict=True):
            writer.write_event(payload, key)
        writer.flush()
        elapsed = time.perf_counter() - began
        writer.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    payloads = [bytes([65 + i % 26]) * args.size for i in range(args.events)]
    everysec = ("--appendfsync", "everysec")
    with (
        local_redis_server(persistent=True, extra_args=everysec) as primary,
        local_redis_server() as replica,
    ):
        follower = redis.Redis(port=replica.port)
        follower.replicaof("127.0.0.1", primary.port)
        while follower.info("replication").get("master_link_status") != "up":
            time.sleep(0.05)
        follower.close()
        scope = f"bench{uuid.uuid4().hex[:6]}"
        best: dict[str, float] = {}
        with StreamManager.from_url(primary.url) as sm:
            sm.create_scope(scope)
            for run in range(args.repeat):
                for index, mode in enumerate(MODES):
                    stream = f"s{run}m{index}"
                    sm.create_stream(scope, stream)
                    seconds = write_all(primary.url, scope, stream, mode, payloads)
                    best[mode] = min(best.get(mode, float("inf")), seconds)
    rate = {mode: args.events / seconds for mode, seconds in best.items()}
    results: dict[str, Any] = {"events": args.events, "event_bytes": args.size}
    for mode in MODES:
        results[mode] = {
            "writer_events_per_s": round(rate[mode]),
            "ratio_to_leader": round(rate[mode] / rate["leader"], 2),
        }
    results["server"] = "valkey/redis binary: primary (appendonly, everysec) + 1 replica"
    emit("acks", results)


if __name__ == "__main__":
    main()
