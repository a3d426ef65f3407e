"""Stream benchmark: writer throughput and batch reads against raw redis-py on the same data.

In one run, against one server, with the same events (``--events`` of ``--size`` bytes, routing
keys ``k0..k999``):

* ``write``: ``EventStreamWriter.write_event`` + ``flush`` into a one-segment stream, against raw
  redis-py pipelined ``XADD key * k <key> p <payload>`` (1000 per pipeline);
  ``ratio`` = ours / raw events per second (goal >= 0.8).
* ``read``: ``BatchClient.read_segment`` (1000 per call) over that segment, against raw
  ``XREAD COUNT 1000`` over the raw stream; ``ratio`` = ours / raw (goal >= 0.8).
* ``write_4_segments``: the writer into a four-segment stream (no raw equivalent: context).

Each measurement is the best of ``--repeat`` runs. Usage:
``python bench/stream_bench.py [--events 200000] [--size 100] [--repeat 3]``. Prints JSON.
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
from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.testing.embedded_redis import redis_server


def raw_write(client: redis.Redis, key: str, payloads: list[bytes], keys: list[str]) -> float:
    began = time.perf_counter()
    for start in range(0, len(payloads), 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(start + 1000, len(payloads))):
            pipe.xadd(key, {"k": keys[i], "p": payloads[i]})
        pipe.execute()
    return time.perf_counter() - began


def raw_read(client: redis.Redis, key: str) -> tuple[float, int]:
    began = time.perf_counter()
    last, count = "0-0", 0
    while True:
        reply = client.xread({key: last}, count=1000)
        if not reply:
            break
        entries = reply[0][1]
        count += len(entries)
        last = entries[-1][0]
    return time.perf_counter() - began, count


def our_write(
    factory: EventStreamClientFactory, stream: str, payloads: list[bytes], keys: list[str]
) -> float:
    writer = factory.create_event_writer(stream, BytesSerializer())
    began = time.perf_counter()
    write = writer.write_event
    for payload, key in zip(payloads, keys, strict=True):
        write(payload, key)
    writer.flush()
    elapsed = time.perf_counter() - began
    writer.close()
    return elapsed


def our_read(factory: EventStreamClientFactory, stream: str, segment: int) -> tuple[float, int]:
    batch = factory.create_batch_client()
    began = time.perf_counter()
    count = 0
    for events in batch.read_segment(stream, segment, 0, -1, 1000):
        count += len(events)
    return time.perf_counter() - began, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    payloads = [bytes([65 + i % 26]) * args.size for i in range(args.events)]
    keys = [f"k{i % 1000}" for i in range(args.events)]
    results: dict[str, Any] = {"events": args.events, "event_bytes": args.size}
    with redis_server() as server:
        client = redis.Redis.from_url(server.url)
        scope = f"bench{uuid.uuid4().hex[:6]}"
        best: dict[str, float] = {}
        with (
            StreamManager.from_url(server.url) as sm,
            EventStreamClientFactory.from_url(scope, server.url) as factory,
        ):
            sm.create_scope(scope)
            for run in range(args.repeat):
                raw_key = f"raw-bench-{run}"
                client.delete(raw_key)
                stream = f"one{run}"
                sm.create_stream(scope, stream)
                four = f"four{run}"
                sm.create_stream(
                    scope, four, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
                )
                timings = {
                    "raw_write": raw_write(client, raw_key, payloads, keys),
                    "our_write": our_write(factory, stream, payloads, keys),
                    "our_write_4": our_write(factory, four, payloads, keys),
                }
                raw_seconds, raw_count = raw_read(client, raw_key)
                our_seconds, our_count = our_read(factory, stream, 0)
                assert raw_count == our_count == args.events, (raw_count, our_count)
                timings["raw_read"], timings["our_read"] = raw_seconds, our_seconds
                for name, seconds in timings.items():
                    best[name] = min(best.get(name, float("inf")), seconds)
                client.delete(raw_key)
        rate = {name: args.events / seconds for name, seconds in best.items()}
        results["write"] = {
            "writer_events_per_s": round(rate["our_write"]),
            "raw_pipelined_xadd_events_per_s": round(rate["raw_write"]),
            "ratio": round(rate["our_write"] / rate["raw_write"], 2),
        }
        results["read"] = {
            "batch_read_events_per_s": round(rate["our_read"]),
            "raw_xread_count_1000_events_per_s": round(rate["raw_read"]),
            "ratio": round(rate["our_read"] / rate["raw_read"], 2),
        }
        results["write_4_segments"] = {"writer_events_per_s": round(rate["our_write_4"])}
        results["server"] = server.kind
        client.close()
    emit("stream", results)


if __name__ == "__main__":
    main()
