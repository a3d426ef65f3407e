"""End-to-end latency benchmark: from the writer's send to the reader's hand-out, against plain
redis-py in the same run (issue 35).

One server. At each rate of ``--rates`` (events/s, default 1k, 10k and 30k) over a 4-segment
stream (4 stream keys for the baseline), two paths take turns ``--rounds`` times for
``--seconds`` each, each with its writer and its reader in processes of their own (nothing else
of the bench runs meanwhile; the rounds of a path are pooled):

* ``plain``: redis-py. The writer sends the events due every millisecond as ``XADD``\\ s in one
  pipeline; the reader loops ``XREADGROUP BLOCK 100 COUNT 1000`` over the 4 keys, hands the
  events out, then ``XACK``\\ s them (one pipeline). The baseline;
* ``readergroup``: ``writer.write_event`` (futures not waited on; routing keys spread over the
  segments) and one reader's ``read_batch(1000)`` owning the 4 segments (default configs).

Each event carries its send time (``time.monotonic_ns()``, one clock for every process on
Linux, taken just before ``write_event`` / the ``XADD`` is queued); the reader takes the
difference when the event is handed out. The first half second of each run is left out
(warm-up). Reported: p50, p99, p99.9 and max in ms, the ratios readergroup / plain, and the
machine's load average around each run.

Then ``join``: reader A owns every segment of the 4-segment stream (2,000 events/s written) when
reader B (another process) joins; two segments move to B. For the segments that stay with A,
the longest gap between two of A's hand-outs while B joins (from B's ``create_reader`` until
1 s after B's first event), beside the longest gap of the same segments before (steady state).
Goal: under 20 ms. Prints JSON.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import struct
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import emit
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

SEGMENTS = 4
PAYLOAD_BYTES = 100
STAMP = struct.Struct("<qq")
"""Send time (monotonic ns) and sequence number, at the head of every payload."""
PADDING = b"x" * (PAYLOAD_BYTES - STAMP.size)
WARMUP_SECONDS = 0.5
ROUTING_KEYS = 64


def _payload(seq: int) -> bytes:
    return STAMP.pack(time.monotonic_ns(), seq) + PADDING


def _paced(rate: int, seconds: float, send: Any) -> int:
    """Call ``send(first_seq, count)`` every millisecond or so with the events due at ``rate``
    per second; returns how many were sent (``rate * seconds``)."""
    total = int(rate * seconds)
    began = time.monotonic()
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - began) * rate)) - sent
        if due <= 0:
            time.sleep(0.0005)
            continue
        send(sent, due)
        sent += due
    return sent


# -- the baseline: plain redis-py -----------------------------------------------------------
def _plain_writer(
    url: str, keys: list[str], rate: int, seconds: float, go: Any, cpu_out: Any
) -> None:
    client = redis.Redis.from_url(url)

    def send(first: int, count: int) -> None:
        pipe = client.pipeline(transaction=False)
        for seq in range(first, first + count):
            pipe.xadd(keys[seq % len(keys)], {"v": _payload(seq)})
        pipe.execute()

    go.wait()
    used = time.process_time()
    _paced(rate, seconds, send)
    cpu_out.put(time.process_time() - used)


def _plain_reader(url: str, keys: list[str], expected: int, ready: Any, out: Any) -> None:
    client = redis.Redis.from_url(url)
    group = "bench"
    for key in keys:
        client.xgroup_create(key, group, id="$", mkstream=True)
    ready.set()
    used = time.process_time()
    latencies: list[tuple[int, int]] = []
    streams = dict.fromkeys(keys, ">")
    deadline = time.monotonic() + 120
    while len(latencies) < expected and time.monotonic() < deadline:
        reply = client.xreadgroup(group, "c", streams, count=1000, block=100)  # type: ignore[arg-type]
        now = time.monotonic_ns()  # handed out
        pipe = client.pipeline(transaction=False)
        for key, entries in reply or []:
            for _entry_id, fields in entries:
                sent_ns, seq = STAMP.unpack_from(fields[b"v"])
                latencies.append((seq, now - sent_ns))
            pipe.xack(key, group, *[entry_id for entry_id, _ in entries])
        pipe.execute()
    out.put((latencies, time.process_time() - used))


# -- readergroup ----------------------------------------------------------------------------
def _rg_writer(url: str, scope: str, rate: int, seconds: float, go: Any, cpu_out: Any) -> None:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer("s", BytesSerializer())

        def send(first: int, count: int) -> None:
            for seq in range(first, first + count):
                writer.write_event(_payload(seq), f"k{seq % ROUTING_KEYS}")

        go.wait()
        used = time.process_time()
        _paced(rate, seconds, send)
        writer.close()  # (every event sent and acknowledged)
        cpu_out.put(time.process_time() - used)


def _rg_reader(url: str, scope: str, expected: int, ready: Any, out: Any) -> None:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        reader = factory.create_reader("r0", "g", BytesSerializer())
        deadline = time.monotonic() + 30
        while len(reader.owned_segments()) < SEGMENTS and time.monotonic() < deadline:
            reader.read_batch(1000, timeout=0.1)
        ready.set()
        used = time.process_time()
        latencies: list[tuple[int, int]] = []
        deadline = time.monotonic() + 120
        while len(latencies) < expected and time.monotonic() < deadline:
            batch = reader.read_batch(1000, timeout=0.1)
            now = time.monotonic_ns()  # handed out
            for event in batch:
                sent_ns, seq = STAMP.unpack_from(event.event or b"")
                latencies.append((seq, now - sent_ns))
        used = time.process_time() - used
        reader.close()
    out.put((latencies, used))


def _percentiles(latencies: list[int]) -> dict[str, Any]:
    values = sorted(latencies)

    def at(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))] / 1e6, 3)

    return {
        "events": len(values),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "p99_9_ms": at(0.999),
        "max_ms": round(values[-1] / 1e6, 3),
    }


@dataclass
class _Round:
    """One round of a path: latencies (ns) after the warm-up, and the CPU seconds its writer
    and reader processes used (every thread of each) over the whole round."""

    latencies: list[int]
    writer_cpu: float
    reader_cpu: float
    events: int


def _one_run(
    ctx: Any, writer: Any, reader: Any, url: str, where: Any, rate: int, seconds: float
) -> _Round:
    """The reader's process (``reader(url, where, expected, ...)``), ready (joined, owning
    every segment), then the writer's (``writer(url, where, rate, seconds, ...)``)."""
    expected = int(rate * seconds)
    ready, go, out, cpu_out = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
    read = ctx.Process(target=reader, args=(url, where, expected, ready, out))
    write = ctx.Process(target=writer, args=(url, where, rate, seconds, go, cpu_out))
    read.start()
    write.start()
    if not ready.wait(60):
        raise RuntimeError("the reader did not get ready")
    time.sleep(0.3)  # the writer's interpreter finished importing
    go.set()
    latencies, reader_cpu = out.get(timeout=300)
    writer_cpu = cpu_out.get(timeout=300)
    for process in (write, read):
        process.join(60)
    if len(latencies) < expected:
        raise RuntimeError(f"{len(latencies)} of {expected} events arrived")
    skip = int(rate * WARMUP_SECONDS)
    kept = [ns for seq, ns in latencies if seq >= skip]
    return _Round(kept, writer_cpu, reader_cpu, len(latencies))


def _plain_round(ctx: Any, url: str, rate: int, seconds: float) -> _Round:
    keys = [f"plain:{uuid.uuid4().hex[:6]}:{i}" for i in range(SEGMENTS)]
    return _one_run(ctx, _plain_writer, _plain_reader, url, keys, rate, seconds)


def _stream_and_group(url: str) -> str:
    """A new scope with a stream ``s`` of :data:`SEGMENTS` fixed segments and a group ``g`` of
    it (default config); returns the scope."""
    scope = f"l{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        sm.create_stream(
            scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(SEGMENTS))
        )
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))
    return scope


def _readergroup_round(ctx: Any, url: str, rate: int, seconds: float) -> _Round:
    scope = _stream_and_group(url)
    return _one_run(ctx, _rg_writer, _rg_reader, url, scope, rate, seconds)


def _summary(rounds: list[_Round]) -> dict[str, Any]:
    events = sum(r.events for r in rounds)
    return {
        **_percentiles([ns for r in rounds for ns in r.latencies]),
        "writer_cpu_us_per_event": round(sum(r.writer_cpu for r in rounds) / events * 1e6, 2),
        "reader_cpu_us_per_event": round(sum(r.reader_cpu for r in rounds) / events * 1e6, 2),
    }


def measure_latency(url: str, rates: list[int], seconds: float, rounds: int) -> dict[str, Any]:
    """Per rate, ``rounds`` rounds of each path, taking turns (so load elsewhere on the machine
    hits both alike); each path's latencies of every round pooled."""
    ctx = mp.get_context("spawn")
    results: dict[str, Any] = {}
    for rate in rates:
        row: dict[str, Any] = {}
        load_before = os.getloadavg()[0]
        done: dict[str, list[_Round]] = {"plain": [], "readergroup": []}
        for _ in range(rounds):
            done["plain"].append(_plain_round(ctx, url, rate, seconds))
            done["readergroup"].append(_readergroup_round(ctx, url, rate, seconds))
        row["plain"] = _summary(done["plain"])
        row["readergroup"] = _summary(done["readergroup"])
        row["ratios_readergroup_vs_plain"] = {
            q: round(row["readergroup"][q] / row["plain"][q], 2)
            for q in ("p50_ms", "p99_ms", "p99_9_ms")
            if row["plain"].get(q) and row["readergroup"].get(q)
        }
        row["load_average_1m"] = {"before": round(load_before, 2), "after": _load()}
        results[f"{rate}_per_s"] = row
    return results


# -- the pause of segments that stay put while a reader joins -------------------------------
def _joining_reader(url: str, scope: str, at: float, seconds: float, out: Any) -> None:
    """Reader B: joins at monotonic ``at``, reads until ``at + seconds``."""
    time.sleep(max(0.0, at - time.monotonic()))
    with EventStreamClientFactory.from_url(scope, url) as factory:
        began = time.monotonic_ns()
        reader = factory.create_reader("b", "g", BytesSerializer())
        first = 0
        taken: set[int] = set()
        while time.monotonic() < at + seconds:
            batch = reader.read_batch(1000, timeout=0.1)
            if batch and not first:
                first = time.monotonic_ns()
            taken.update(event.segment or 0 for event in batch)
        reader.close()
    out.put({"join_began_ns": began, "first_event_ns": first, "taken": sorted(taken)})


def _staying_reader(url: str, scope: str, until: float, ready: Any, out: Any) -> None:
    """Reader A: owns every segment first; records (segment, hand-out ns) until ``until``."""
    with EventStreamClientFactory.from_url(scope, url) as factory:
        reader = factory.create_reader("a", "g", BytesSerializer())
        while len(reader.owned_segments()) < SEGMENTS:
            reader.read_batch(1000, timeout=0.1)
        ready.set()
        handed: list[tuple[int, int]] = []
        while time.monotonic() < until:
            batch = reader.read_batch(1000, timeout=0.1)
            now = time.monotonic_ns()
            handed += [(event.segment or 0, now) for event in batch]
        reader.close()
    out.put(handed)


def _max_gap(times: list[int], start: int, end: int) -> float:
    """Longest gap (ms) between consecutive hand-outs whose span overlaps [start, end]."""
    gaps = [b - a for a, b in itertools.pairwise(times) if b >= start and a <= end]
    return round(max(gaps, default=0) / 1e6, 2)


def measure_join(url: str, rate: int, repeat: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    runs = []
    for _ in range(repeat):
        scope = _stream_and_group(url)
        load_before = os.getloadavg()[0]
        ready, go, a_out, b_out = ctx.Event(), ctx.Event(), ctx.Queue(), ctx.Queue()
        seconds = 7.0
        begin = time.monotonic() + 3.0  # every process started by then
        a = ctx.Process(target=_staying_reader, args=(url, scope, begin + seconds, ready, a_out))
        a.start()
        writer_cpu = ctx.Queue()  # (not read; held until the writer is done)
        writer = ctx.Process(
            target=_rg_writer, args=(url, scope, rate, seconds + 2, go, writer_cpu)
        )
        writer.start()
        joining = ctx.Process(target=_joining_reader, args=(url, scope, begin + 3.0, 3.5, b_out))
        joining.start()
        if not ready.wait(60):
            raise RuntimeError("reader A did not get ready")
        time.sleep(max(0.0, begin - time.monotonic()))
        go.set()
        handed: list[tuple[int, int]] = a_out.get(timeout=120)
        joined: dict[str, Any] = b_out.get(timeout=120)
        for process in (a, writer, joining):
            process.join(60)
        by_segment: dict[int, list[int]] = defaultdict(list)
        for segment, at in handed:
            by_segment[segment].append(at)
        join_began, first = joined["join_began_ns"], joined["first_event_ns"]
        window_end = (first or join_began) + 1_000_000_000
        staying = [s for s in by_segment if s not in joined["taken"]]
        steady_from = int((begin + 1.0) * 1e9)
        runs.append(
            {
                "segments_staying": len(staying),
                "segments_moved": len(joined["taken"]),
                "max_gap_staying_while_joining_ms": max(
                    (_max_gap(by_segment[s], join_began, window_end) for s in staying), default=0
                ),
                "max_gap_staying_before_ms": max(
                    (
                        _max_gap(by_segment[s], steady_from, join_began - 500_000_000)
                        for s in staying
                    ),
                    default=0,
                ),
                "join_to_first_event_ms": round((first - join_began) / 1e6, 1) if first else None,
                "load_average_1m": {"before": round(load_before, 2), "after": _load()},
            }
        )
    return {"rate_per_s": rate, "segments": SEGMENTS, "runs": runs}


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rates", default="1000,10000,30000")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--join-rate", type=int, default=2000)
    parser.add_argument("--join-repeat", type=int, default=3)
    args = parser.parse_args()
    rates = [int(rate) for rate in args.rates.split(",")]
    with redis_server() as server:
        emit(
            "latency",
            {
                "cpus": os.cpu_count(),
                "load_average_1m_start": _load(),
                "latency": measure_latency(server.url, rates, args.seconds, args.rounds),
                "join": measure_join(server.url, args.join_rate, args.join_repeat),
                "load_average_1m_end": _load(),
            },
        )


if __name__ == "__main__":
    main()
