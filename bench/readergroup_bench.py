"""Reader group benchmark: read throughput against raw XREAD and Redis consumer groups.

In one run, against one server, on the same data (``--events`` events of 100 bytes):

* ``one_reader``: one reader of a group on a one-segment stream (``read_batch(1000)``), against a
  raw ``XREAD COUNT 1000`` loop and a Redis consumer group (``XREADGROUP COUNT 1000`` + ``XACK``
  of every batch) over the very same segment key.
* ``four_processes``: four reader processes of one group on an eight-segment stream, against
  four processes each reading two of the segment keys with raw ``XREAD`` / ``XREADGROUP+XACK``.
  Rates are total events / (last process done - common start).
* ``rebalance``: seconds from a fifth reader joining (default timing) until the group is
  balanced, and from a SIGKILL until the dead reader's segments are owned again (the default
  10 s session timeout dominates that one).

Goals: ours >= 0.8x raw XREAD and >= 1.6x XREADGROUP+XACK. Prints JSON.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import emit, run_processes
from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderConfig,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.testing.embedded_redis import redis_server

PAYLOAD = b"x" * 100


def _write(url: str, scope: str, stream: str, count: int) -> None:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer(stream, BytesSerializer())
        for i in range(count):
            writer.write_event(PAYLOAD, f"k{i % 1000}")
        writer.close()


def _raw_xread(url: str, keys: list[str], expected: int, start: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    start.wait()
    began = time.perf_counter()
    last = dict.fromkeys(keys, "0-0")
    count = 0
    while count < expected:
        for key, entries in client.xread(last, count=1000) or []:
            name = key.decode()
            count += len(entries)
            last[name] = entries[-1][0]
    out.put({"events": count, "seconds": time.perf_counter() - began})


def _raw_xreadgroup(url: str, keys: list[str], expected: int, start: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    group = f"bench-{uuid.uuid4().hex[:6]}"
    for key in keys:
        client.xgroup_create(key, group, id="0")
    start.wait()
    began = time.perf_counter()
    count = 0
    streams = dict.fromkeys(keys, ">")
    while count < expected:
        for key, entries in client.xreadgroup(group, "c", streams, count=1000) or []:
            count += len(entries)
            client.xack(key, group, *[entry_id for entry_id, _ in entries])
    out.put({"events": count, "seconds": time.perf_counter() - began})


def _ours(
    url: str, scope: str, group: str, reader_id: str, expected: int, start: Any, out: Any
) -> None:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        reader = factory.create_reader(reader_id, group, BytesSerializer(), ReaderConfig())
        start.wait()
        began = time.perf_counter()
        count, last = 0, began
        while count < expected:
            batch = reader.read_batch(1000, timeout=1.0)
            if not batch:
                break  # the group's share of this reader is done
            count += len(batch)
            last = time.perf_counter()
        out.put({"events": count, "seconds": last - began})
        reader.close()


def _rate(rows: list[dict[str, Any]]) -> float:
    return sum(r["events"] for r in rows) / max(r["seconds"] for r in rows)


def one_reader(url: str, events: int) -> dict[str, Any]:
    scope = f"b{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s")
        key = sm.connection.keys.segment(scope, "s", 0).events
    _write(url, scope, "s", events)
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))
    ours = _rate(run_processes(_ours, [(url, scope, "g", "r0", events)]))
    raw = _rate(run_processes(_raw_xread, [(url, [key], events)]))
    group = _rate(run_processes(_raw_xreadgroup, [(url, [key], events)]))
    return {
        "reader_events_per_s": round(ours),
        "raw_xread_events_per_s": round(raw),
        "xreadgroup_xack_events_per_s": round(group),
        "ratio_to_raw_xread": round(ours / raw, 2),
        "ratio_to_xreadgroup_xack": round(ours / group, 2),
    }


def four_processes(url: str, events: int) -> dict[str, Any]:
    scope = f"b{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(8)))
        keys = [sm.connection.keys.segment(scope, "s", s).events for s in range(8)]
        _write(url, scope, "s", events)
        tails = sm.segment_states(scope, "s", list(range(8)))
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))
    # readers join before the clock starts; each reads until its share is exhausted
    ours_rows = run_processes(_ours, [(url, scope, "g", f"r{i}", events) for i in range(4)])
    pairs = [keys[2 * i : 2 * i + 2] for i in range(4)]
    expected = [tails[2 * i].tail + tails[2 * i + 1].tail for i in range(4)]
    raw = _rate(
        run_processes(_raw_xread, [(url, p, e) for p, e in zip(pairs, expected, strict=True)])
    )
    group = _rate(
        run_processes(_raw_xreadgroup, [(url, p, e) for p, e in zip(pairs, expected, strict=True)])
    )
    ours = _rate(ours_rows)
    assert sum(r["events"] for r in ours_rows) == events, ours_rows
    return {
        "group_events_per_s": round(ours),
        "raw_xread_events_per_s": round(raw),
        "xreadgroup_xack_events_per_s": round(group),
        "ratio_to_raw_xread": round(ours / raw, 2),
        "ratio_to_xreadgroup_xack": round(ours / group, 2),
    }


def _member(url: str, scope: str, reader_id: str, stop_after: float) -> None:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        reader = factory.create_reader(reader_id, "g", BytesSerializer())
        deadline = time.monotonic() + stop_after
        while time.monotonic() < deadline:
            reader.read_next_event(timeout=0.5)
        reader.close()


def rebalance(url: str) -> dict[str, Any]:
    import multiprocessing as mp

    scope = f"b{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(8)))
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))
        group = rgm.get_reader_group("g")
    ctx = mp.get_context("spawn")

    def balanced(readers: int) -> bool:
        dist = group.get_segment_distribution()
        sizes = [len(s) for s in dist.assigned.values()]
        return len(sizes) == readers and sum(sizes) == 8 and max(sizes) - min(sizes) <= 1

    def wait(condition: Any, limit: float = 60) -> float:
        began = time.monotonic()
        while not condition():
            if time.monotonic() - began > limit:
                raise TimeoutError
            time.sleep(0.005)
        return time.monotonic() - began

    procs = [ctx.Process(target=_member, args=(url, scope, f"r{i}", 60)) for i in range(4)]
    for proc in procs:
        proc.start()
    wait(lambda: balanced(4))
    newcomer = ctx.Process(target=_member, args=(url, scope, "r4", 60))
    newcomer.start()
    wait(lambda: "r4" in group.get_online_readers())
    join_to_balanced = wait(lambda: balanced(5))
    victim = procs[0]
    os.kill(victim.pid or 0, signal.SIGKILL)
    killed = time.monotonic()
    wait(lambda: balanced(4) and "r0" not in group.get_online_readers())
    kill_to_reowned = time.monotonic() - killed
    for proc in [*procs[1:], newcomer]:
        proc.terminate()
        proc.join(10)
    return {
        "join_to_balanced_s": round(join_to_balanced, 3),
        "kill_to_reowned_s": round(kill_to_reowned, 3),
        "session_timeout_s": 10.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    args = parser.parse_args()
    with redis_server() as server:
        emit(
            "readergroup",
            {
                "server": server.kind,
                "events": args.events,
                "event_bytes": len(PAYLOAD),
                "one_reader": one_reader(server.url, args.events),
                "four_processes": four_processes(server.url, args.events),
                "rebalance": rebalance(server.url),
            },
        )


if __name__ == "__main__":
    main()
