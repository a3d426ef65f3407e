"""Read-path benchmark: what users call (one event at a time) against raw Redis, same run.

One server, one one-segment stream of ``--events`` events of 100 bytes. The per-event paths run
in one spawned process taking turns ``--chunk`` events at a time (so load elsewhere on the
machine hits all of them alike), each reading every event:

* a raw ``XREAD COUNT 1000`` loop and a Redis consumer group (``XREADGROUP COUNT 1000`` +
  ``XACK`` of every batch) over the very same segment key: the baselines;
* ``read_next_event``: a ``read_next_event()`` loop. Goals: >= 0.8x raw XREAD and >= 1.6x
  XREADGROUP+XACK;
* ``iteration``: ``for event in reader`` (the same fast path);
* ``read_batch``: ``read_batch(1000)`` (goal >= 0.95x raw XREAD).

Then, in processes of their own (best of ``--repeat``):

* ``run``: ``reader.run(handler)`` with a no-op handler and one worker (reported; a batch's
  events go to the worker a run of one segment at a time);
* ``proxy``: ``read_batch(1000)`` through a TCP proxy (in the bench's process) adding 1 ms to
  every reply, against the same proxy adding nothing (goal >= 0.8x): reading ahead overlaps
  round trips.

Rates are reported per wall-clock second and per client CPU-second (``process_time`` of the
reading process: what a path costs the client, which a loaded machine distorts less). Prints
JSON with the machine's load average.
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


def _interleaved(
    url: str, scope: str, key: str, events: int, chunk: int, start: Any, out: Any
) -> None:
    """Every per-event path in one process, taking turns ``chunk`` events at a time until each
    has read all ``events``: load elsewhere on the machine hits every path alike."""
    client = redis.Redis.from_url(url)
    consumer_group = f"bench-{uuid.uuid4().hex[:6]}"
    client.xgroup_create(key, consumer_group, id="0")
    last = ["0-0"]

    def xread(n: int) -> int:
        got = 0
        while got < n:
            for _, entries in client.xread({key: last[0]}, count=1000) or []:
                got += len(entries)
                last[0] = entries[-1][0]
        return got

    def xreadgroup(n: int) -> int:
        got = 0
        while got < n:
            for _, entries in client.xreadgroup(consumer_group, "c", {key: ">"}, count=1000) or []:
                got += len(entries)
                client.xack(key, consumer_group, *[entry_id for entry_id, _ in entries])
        return got

    with EventStreamClientFactory.from_url(scope, url) as factory:
        readers = {
            how: factory.create_reader(f"r-{how}", how, BytesSerializer(), ReaderConfig())
            for how in ("read_next_event", "iteration", "read_batch")
        }
        by_event = readers["read_next_event"]
        iterator = iter(readers["iteration"])
        batches = readers["read_batch"]

        def read_next_event(n: int) -> int:
            for _ in range(n):
                if by_event.read_next_event(timeout=5.0).event is None:
                    raise AssertionError("read_next_event ran dry")
            return n

        def iteration(n: int) -> int:
            for _ in range(n):
                next(iterator)
            return n

        def read_batch(n: int) -> int:
            got = 0
            while got < n:
                batch = batches.read_batch(min(1000, n - got), timeout=5.0)
                if not batch:
                    raise AssertionError("read_batch ran dry")
                got += len(batch)
            return got

        paths = {
            "xread": xread,
            "xreadgroup": xreadgroup,
            "read_next_event": read_next_event,
            "iteration": iteration,
            "read_batch": read_batch,
        }
        for reader in readers.values():  # joined, segments acquired: start the clocks after
            reader.read_batch(1, timeout=5.0)
        done = dict.fromkeys(paths, 1)
        wall = dict.fromkeys(paths, 0.0)
        cpu = dict.fromkeys(paths, 0.0)
        done["xread"] = done["xreadgroup"] = 0
        start.wait()
        while any(count < events for count in done.values()):
            for name, path in paths.items():
                n = min(chunk, events - done[name])
                if n <= 0:
                    continue
                began, used = time.perf_counter(), time.process_time()
                done[name] += path(n)
                wall[name] += time.perf_counter() - began
                cpu[name] += time.process_time() - used
        for reader in readers.values():
            reader.close()
    out.put(
        {name: {"events": done[name], "seconds": wall[name], "cpu": cpu[name]} for name in paths}
    )


def measure(url: str, events: int, repeat: int, chunk: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    target = urlparse(url)
    host, port = target.hostname or "127.0.0.1", target.port or 6379
    scope = f"b{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s")
        key = sm.connection.keys.segment(scope, "s", 0).events
    _write(url, scope, "s", events)
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    with ReaderGroupManager.from_url(scope, url) as rgm:
        for how in ("read_next_event", "iteration", "read_batch"):
            rgm.create_reader_group(how, ReaderGroupConfig(streams=[f"{scope}/s"]))
        (rows,) = run_processes(_interleaved, [(url, scope, key, events, chunk)])
        for name, row in rows.items():
            wall[name], cpu[name] = _rates([row], events)
        for round_ in range(repeat):  # separate processes, best of ``repeat``
            for how in ("run", "proxy:0", "proxy:0.001"):
                group = f"g{round_}-{how.replace(':', '-').replace('.', '-')}"
                rgm.create_reader_group(group, ReaderGroupConfig(streams=[f"{scope}/s"]))
                if how.startswith("proxy:"):  # "proxy:<seconds of delay per reply>"
                    # the proxy runs in this (otherwise idle) process, not the reader's
                    with ReplyDroppingProxy(host, port, reply_delay=float(how[6:])) as proxy:
                        rows = run_processes(_reader, [(proxy.url, scope, group, how, events)])
                else:
                    rows = run_processes(_reader, [(url, scope, group, how, events)])
                rate, cpu_rate = _rates(rows, events)
                wall[how], cpu[how] = max(wall.get(how, 0.0), rate), max(cpu.get(how, 0), cpu_rate)

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
        "chunk": chunk,
        "repeat": repeat,
        "load_average_1m": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)},
        "events_per_s": {name: round(value) for name, value in wall.items()},
        "ratios": ratios(wall),
        "events_per_client_cpu_s": {name: round(value) for name, value in cpu.items()},
        "ratios_by_client_cpu": ratios(cpu),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=5000)
    args = parser.parse_args()
    with redis_server() as server:
        emit("read_path", measure(server.url, args.events, args.repeat, args.chunk))


if __name__ == "__main__":
    main()
