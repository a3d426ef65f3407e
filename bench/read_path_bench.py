"""Read-path benchmark: what users call (one event at a time) against raw Redis, same run.

One server, one one-segment stream of ``--events`` events of 100 bytes, every path reading all
of them in its own process (spawned, started together with nothing else running):

* ``read_next_event``: a ``read_next_event()`` loop, against a raw ``XREAD COUNT 1000`` loop and
  a Redis consumer group (``XREADGROUP COUNT 1000`` + ``XACK`` of every batch) over the very
  same segment key. Goals: >= 0.8x raw XREAD and >= 1.6x XREADGROUP+XACK.
* ``iteration``: ``for event in reader`` (the same fast path).
* ``read_batch``: ``read_batch(1000)`` against raw XREAD (goal >= 0.95x).
* ``run``: ``reader.run(handler)`` with a no-op handler (reported; its workers hand events over
  between threads).
* ``latency``: ``read_batch(1000)`` through a TCP proxy adding 1 ms to every reply, against the
  same proxy adding nothing (goal >= 0.8x): reading ahead overlaps round trips.

Each rate is the best of ``--repeat`` runs (the paths take turns, so a burst of load elsewhere
on the machine hits one run, not one path); besides wall-clock rates it reports rates per
client CPU-second (``process_time`` of the reading process: what the path costs the client,
which load on a shared machine does not distort). Prints JSON with the machine's load.
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
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

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
from readergroup.testing.embedded_redis import redis_server
from tests.support.proxy import ReplyDroppingProxy


def _reader(
    url: str, scope: str, group: str, how: str, expected: int, start: Any, out: Any
) -> None:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        reader = factory.create_reader("r0", group, BytesSerializer(), ReaderConfig())
        start.wait()
        began, cpu = time.perf_counter(), time.process_time()
        count = 0
        if how == "read_next_event":
            while count < expected:
                if reader.read_next_event(timeout=5.0).event is None:
                    break
                count += 1
        elif how == "iteration":
            for _ in reader:
                count += 1
                if count >= expected:
                    break
        elif how == "run":
            done = threading.Event()
            handled = [0]

            def handler(_: Any) -> None:
                handled[0] += 1  # one worker: no lock needed
                if handled[0] >= expected:
                    done.set()

            reader.run(handler, max_workers=1, stop=done, handle_signals=False)
            count = handled[0]
        else:  # read_batch, directly or through the proxy
            while count < expected:
                batch = reader.read_batch(1000, timeout=5.0)
                if not batch:
                    break
                count += len(batch)
        seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
        out.put({"events": count, "seconds": seconds, "cpu": cpu})
        reader.close()


def _rates(rows: list[dict[str, Any]], expected: int) -> tuple[float, float]:
    """(events per second, events per client CPU-second; 0 when not measured)."""
    (row,) = rows
    assert row["events"] >= expected, row
    cpu = row.get("cpu", 0.0)
    return row["events"] / row["seconds"], (row["events"] / cpu if cpu else 0.0)


def _raw_xread(url: str, key: str, expected: int, start: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    start.wait()
    began, cpu = time.perf_counter(), time.process_time()
    last, count = "0-0", 0
    while count < expected:
        for _, entries in client.xread({key: last}, count=1000) or []:
            count += len(entries)
            last = entries[-1][0]
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    out.put({"events": count, "seconds": seconds, "cpu": cpu})


def _raw_xreadgroup(url: str, key: str, expected: int, start: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    group = f"bench-{uuid.uuid4().hex[:6]}"
    client.xgroup_create(key, group, id="0")
    start.wait()
    began, cpu = time.perf_counter(), time.process_time()
    count = 0
    while count < expected:
        for _, entries in client.xreadgroup(group, "c", {key: ">"}, count=1000) or []:
            count += len(entries)
            client.xack(key, group, *[entry_id for entry_id, _ in entries])
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    out.put({"events": count, "seconds": seconds, "cpu": cpu})


def measure(url: str, events: int, repeat: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    target = urlparse(url)
    host, port = target.hostname or "127.0.0.1", target.port or 6379
    scope = f"b{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s")
        key = sm.connection.keys.segment(scope, "s", 0).events
    _write(url, scope, "s", events)
    paths = ["read_next_event", "iteration", "read_batch", "run", "proxy:0", "proxy:0.001"]
    wall: dict[str, list[float]] = {name: [] for name in [*paths, "xread", "xreadgroup"]}
    cpu: dict[str, list[float]] = {name: [] for name in wall}
    with ReaderGroupManager.from_url(scope, url) as rgm:
        for round_ in range(repeat):
            for how in ["xread", *paths, "xreadgroup"]:
                if how == "xread":
                    rows = run_processes(_raw_xread, [(url, key, events)])
                elif how == "xreadgroup":
                    rows = run_processes(_raw_xreadgroup, [(url, key, events)])
                elif how.startswith("proxy:"):  # "proxy:<seconds of delay per reply>"
                    group = f"g{round_}-{how.replace(':', '-').replace('.', '-')}"
                    rgm.create_reader_group(group, ReaderGroupConfig(streams=[f"{scope}/s"]))
                    # the proxy runs in this (otherwise idle) process, not the reader's
                    with ReplyDroppingProxy(host, port, reply_delay=float(how[6:])) as proxy:
                        rows = run_processes(_reader, [(proxy.url, scope, group, how, events)])
                else:
                    group = f"g{round_}-{how}"
                    rgm.create_reader_group(group, ReaderGroupConfig(streams=[f"{scope}/s"]))
                    rows = run_processes(_reader, [(url, scope, group, how, events)])
                rate, cpu_rate = _rates(rows, events)
                wall[how].append(rate)
                cpu[how].append(cpu_rate)
    best = {name: max(values) for name, values in wall.items()}
    best_cpu = {name: max(values) for name, values in cpu.items()}

    def ratios(m: dict[str, float]) -> dict[str, float]:
        return {
            "read_next_event_vs_raw_xread": round(m["read_next_event"] / m["xread"], 2),
            "read_next_event_vs_xreadgroup_xack": round(m["read_next_event"] / m["xreadgroup"], 2),
            "iteration_vs_raw_xread": round(m["iteration"] / m["xread"], 2),
            "read_batch_vs_raw_xread": round(m["read_batch"] / m["xread"], 2),
            "run_noop_vs_raw_xread": round(m["run"] / m["xread"], 2),
            "proxy_1ms_vs_proxy_0ms": round(m["proxy:0.001"] / m["proxy:0"], 2),
        }

    return {
        "events": events,
        "repeat": repeat,
        "load_average_1m": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)},
        "events_per_s": {name: round(value) for name, value in best.items()},
        "ratios": ratios(best),
        "events_per_client_cpu_s": {name: round(value) for name, value in best_cpu.items()},
        "ratios_by_client_cpu": ratios(best_cpu),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with redis_server() as server:
        emit("read_path", measure(server.url, args.events, args.repeat))


if __name__ == "__main__":
    main()
