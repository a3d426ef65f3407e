"""asyncio reader benchmark (issue 29): the asyncio reader against the threaded one.

Against one private server, each measurement in a process of its own (spawned one after the
other, never two at once):

* ``per_event``: ``--events`` 100-byte events in a one-segment stream read one at a time, by the
  threaded ``read_next_event`` and by ``async for``; events/s over the reads alone, the
  ``--repeat`` alternated runs' median; ratio async over sync (the goal: >= 0.9).
* ``many_readers``: ``--readers`` asyncio readers of one group over ``--segments`` segments in
  ONE process and loop, joined one after the other (each reads with ``read_next_event(0.05)``
  in a task of its own): seconds from the last join to every reader owning its fair share
  (goal: <= 2 s); then, idle (nothing written), the process's CPU over ``--idle`` seconds as a
  share of one core (goal: <= 5%) and the server's commands per reader per second (``INFO
  stats``: every client's, the group's only); the same commands figure for ``--sync-readers``
  threaded readers of another group over as many segments, and for as many asyncio readers
  (the per-reader figure depends on the group's size; goal: async <= sync).
* ``tail``: one reader following the tail of a one-segment stream a writer process feeds at
  ``--tail-rate`` events/s (each read answers a few events: the steady state of a reader keeping
  up), threaded and asyncio alternated, ``--repeat`` runs each: the reader process's CPU per
  event over ``--tail-seconds`` s, medians, and the ratio async over sync.
* ``loop_lag``: the event loop's p99 lag (a probe task asking to run every 1 ms) while one
  asyncio reader consumes ``--lag-events`` events with ``async for``, paced at ``--lag-rate``
  events/s (the goal: p99 <= 5 ms at 50k events/s), then as fast as it can, with its events/s.

Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import emit, median, run_processes
from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.testing.embedded_redis import local_redis_server


def _p99_ms(lags: list[float]) -> float:
    ordered = sorted(lags)
    return ordered[int(len(ordered) * 0.99)] * 1000 if ordered else float("nan")


def _stream(url: str, scope: str, segments: int, events: int) -> str:
    stream = f"s{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as manager:
        manager.create_stream(
            scope, stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )
    if events:
        with EventStreamClientFactory.from_url(scope, url) as factory:
            writer = factory.create_event_writer(stream, BytesSerializer())
            payload = b"x" * 100
            for n in range(events):
                writer.write_event(payload, routing_key=f"k{n % 100}")
            writer.flush()
    return stream


def _group(url: str, scope: str, stream: str) -> str:
    group = f"g{uuid.uuid4().hex[:6]}"
    with ReaderGroupManager.from_url(scope, url) as groups:
        groups.create_reader_group(group, ReaderGroupConfig(streams=[f"{scope}/{stream}"]))
    return group


# -- per-event reads -------------------------------------------------------------------------
Done = Callable[[int, float], bool]
"""Whether a measured read loop stops: given the events read and when it began."""


def _reads(kind: str, url: str, scope: str, group: str, done: Done) -> tuple[int, float, float]:
    """A reader of ``kind`` (``sync``: ``read_next_event``; ``async``: ``async for``) reading
    one event at a time until ``done``: events, seconds and the process's CPU seconds (after
    its first event)."""
    if kind == "sync":
        with EventStreamClientFactory.from_url(scope, url) as factory:
            reader = factory.create_reader("r", group, BytesSerializer())
            reader.read_next_event(timeout=10)
            began, cpu, n = time.perf_counter(), time.process_time(), 1
            while not done(n, began):
                n += reader.read_next_event(timeout=5).is_event
            result = (n, time.perf_counter() - began, time.process_time() - cpu)
            reader.close()
        return result

    async def main() -> tuple[int, float, float]:
        async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
            reader = await factory.create_reader("r", group, BytesSerializer())
            await reader.read_next_event(timeout=10)
            began, cpu, n = time.perf_counter(), time.process_time(), 1
            async for _ in reader:
                n += 1
                if done(n, began):
                    break
            result = (n, time.perf_counter() - began, time.process_time() - cpu)
            await reader.close()
            return result

    return asyncio.run(main())


def _per_event(
    kind: str, url: str, scope: str, group: str, events: int, start: Any, out: Any
) -> None:
    start.wait()
    _, seconds, cpu = _reads(kind, url, scope, group, lambda n, _: n >= events)
    out.put((seconds, cpu))


# -- a reader following the tail -------------------------------------------------------------
def _tail(
    kind: str,
    url: str,
    scope: str,
    stream: str,
    group: str,
    rate: float,
    seconds: float,
    start: Any,
    out: Any,
) -> None:
    start.wait()
    if kind != "writer":
        events, _, cpu = _reads(
            kind, url, scope, group, lambda _, began: time.perf_counter() - began >= seconds
        )
        out.put((events, cpu))
        return
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer(stream, BytesSerializer())
        began, n = time.monotonic(), 0
        while (elapsed := time.monotonic() - began) < seconds + 3:
            while n < int(elapsed * rate):
                writer.write_event(b"x" * 100, routing_key=f"k{n % 100}")
                n += 1
            writer.flush()
            time.sleep(0.001)
    out.put(None)


# -- many readers in one loop ----------------------------------------------------------------
def _commands(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("stats")["total_commands_processed"])
    finally:
        client.close()


def _many_async(
    url: str, scope: str, group: str, readers: int, segments: int, idle: float, start: Any, out: Any
) -> None:
    start.wait()

    async def main() -> dict[str, float]:
        async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
            made = []
            stop = asyncio.Event()

            async def read(reader: Any) -> None:
                while not stop.is_set():
                    await reader.read_next_event(timeout=0.5)

            tasks = []
            for n in range(readers):
                reader = await factory.create_reader(f"r{n}", group, BytesSerializer())
                made.append(reader)
                tasks.append(asyncio.create_task(read(reader)))
            joined = time.perf_counter()
            low, high = segments // readers, -(-segments // readers)
            while (
                not all(low <= len(r.assignment()) <= high for r in made)
                or sum(len(r.assignment()) for r in made) != segments
            ):
                await asyncio.sleep(0.01)
            balanced = time.perf_counter() - joined
            await asyncio.sleep(2)  # settle
            commands, cpu, began = _commands(url), time.process_time(), time.perf_counter()
            await asyncio.sleep(idle)
            elapsed = time.perf_counter() - began
            cpu_share = (time.process_time() - cpu) / elapsed
            per_reader = (_commands(url) - commands) / readers / elapsed
            stop.set()
            await asyncio.gather(*tasks)
            return {"balanced_s": balanced, "idle_cpu": cpu_share, "commands": per_reader}

    out.put(asyncio.run(main()))


def _many_sync(
    url: str, scope: str, group: str, readers: int, idle: float, start: Any, out: Any
) -> None:
    import threading

    start.wait()
    stop = threading.Event()
    with EventStreamClientFactory.from_url(scope, url) as factory:
        made = [factory.create_reader(f"r{n}", group, BytesSerializer()) for n in range(readers)]

        def read(reader: Any) -> None:
            while not stop.is_set():
                reader.read_next_event(timeout=0.5)

        threads = [threading.Thread(target=read, args=(r,)) for r in made]
        for thread in threads:
            thread.start()
        time.sleep(5)  # balanced and settled
        commands, began = _commands(url), time.perf_counter()
        time.sleep(idle)
        elapsed = time.perf_counter() - began
        per_reader = (_commands(url) - commands) / readers / elapsed
        stop.set()
        for thread in threads:
            thread.join(10)
    out.put({"commands": per_reader})


# -- loop lag while reading ------------------------------------------------------------------
def _lag(url: str, scope: str, group: str, events: int, rate: float, start: Any, out: Any) -> None:
    start.wait()

    async def main() -> dict[str, float]:
        lags: list[float] = []

        async def probe() -> None:
            while True:
                before = time.perf_counter()
                await asyncio.sleep(0.001)
                lags.append(time.perf_counter() - before - 0.001)

        async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
            reader = await factory.create_reader("r", group, BytesSerializer())
            await reader.read_next_event(timeout=5)
            probing = asyncio.create_task(probe())
            await asyncio.sleep(0.5)
            idle, lags[:] = _p99_ms(lags), []
            began, n = time.perf_counter(), 1
            async for _ in reader:
                n += 1
                if n == events:
                    break
                if rate:  # paced: sleep whenever a millisecond ahead of ``rate``
                    ahead = began + n / rate - time.perf_counter()
                    if ahead > 0.001:
                        await asyncio.sleep(ahead)
            elapsed = time.perf_counter() - began
            probing.cancel()
            await reader.close()
        return {"events_per_s": events / elapsed, "p99_ms": _p99_ms(lags), "idle_p99_ms": idle}

    out.put(asyncio.run(main()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--sync-readers", type=int, default=20)
    parser.add_argument("--segments", type=int, default=1024)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--lag-events", type=int, default=200_000)
    parser.add_argument("--lag-rate", type=float, default=50_000.0)
    parser.add_argument("--tail-rate", type=float, default=2000.0)
    parser.add_argument("--tail-seconds", type=float, default=5.0)
    parser.add_argument("--parts", default="per_event,tail,many_readers,loop_lag")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    results: dict[str, Any] = {}
    loaded = round(os.getloadavg()[0], 2)
    with local_redis_server() as server:
        url, scope = server.url, f"b{uuid.uuid4().hex[:8]}"
        with StreamManager.from_url(url) as manager:
            manager.create_scope(scope)
        if "per_event" in parts:
            stream = _stream(url, scope, 1, args.events)
            rates: dict[str, list[float]] = {"sync": [], "async": []}
            cpus: dict[str, list[float]] = {"sync": [], "async": []}
            for _ in range(args.repeat):
                for kind in ("sync", "async"):
                    group = _group(url, scope, stream)
                    ((seconds, cpu),) = run_processes(
                        _per_event, [(kind, url, scope, group, args.events)]
                    )
                    rates[kind].append(args.events / seconds)
                    cpus[kind].append(cpu * 1e6 / args.events)
            sync, aio = median(rates["sync"]), median(rates["async"])
            results["per_event"] = {
                "sync_events_per_s": round(sync),
                "async_events_per_s": round(aio),
                "ratio_async_over_sync": round(aio / sync, 2),
                "runs": {k: [round(v) for v in vs] for k, vs in rates.items()},
                "client_cpu_s_per_million_events": {
                    k: round(median(vs), 2) for k, vs in cpus.items()
                },
            }
        if "tail" in parts:
            tail_cpu: dict[str, list[float]] = {"sync": [], "async": []}
            for _ in range(args.repeat):
                for kind, cpu_runs in tail_cpu.items():
                    stream = _stream(url, scope, 1, 0)
                    same = (url, scope, stream, _group(url, scope, stream), args.tail_rate)
                    done = run_processes(
                        _tail,
                        [("writer", *same, args.tail_seconds), (kind, *same, args.tail_seconds)],
                    )
                    ((events, cpu),) = [result for result in done if result is not None]
                    cpu_runs.append(cpu * 1e6 / events)
            sync, aio = median(tail_cpu["sync"]), median(tail_cpu["async"])
            results["tail"] = {
                "rate": args.tail_rate,
                "client_cpu_us_per_event": {"sync": round(sync, 1), "async": round(aio, 1)},
                "ratio_async_over_sync": round(aio / sync, 2),
                "runs": {k: [round(v, 1) for v in vs] for k, vs in tail_cpu.items()},
            }
        if "many_readers" in parts:
            stream = _stream(url, scope, args.segments, 0)
            (many,) = run_processes(
                _many_async,
                [(url, scope, _group(url, scope, stream), args.readers, args.segments, args.idle)],
            )
            stream = _stream(url, scope, args.segments, 0)
            same = (url, scope, _group(url, scope, stream), args.sync_readers, args.segments)
            (async_few,) = run_processes(_many_async, [(*same, args.idle)])
            stream = _stream(url, scope, args.segments, 0)
            (sync_many,) = run_processes(
                _many_sync, [(url, scope, _group(url, scope, stream), args.sync_readers, args.idle)]
            )
            results["many_readers"] = {
                "readers": args.readers,
                "segments": args.segments,
                "balanced_after_last_join_s": round(many["balanced_s"], 2),
                "idle_cpu_share_of_one_core": round(many["idle_cpu"], 3),
                "idle_commands_per_reader_per_s_async": round(many["commands"], 2),
                "idle_commands_per_reader_per_s_sync": round(sync_many["commands"], 2),
                "idle_commands_per_reader_per_s_async_as_many_as_sync": round(
                    async_few["commands"], 2
                ),
                "sync_readers": args.sync_readers,
            }
        if "loop_lag" in parts:
            stream = _stream(url, scope, 1, args.lag_events)
            lags: dict[float, list[dict[str, float]]] = {args.lag_rate: [], 0.0: []}
            for _ in range(args.repeat):
                for rate, runs in lags.items():
                    group = _group(url, scope, stream)
                    (lag,) = run_processes(_lag, [(url, scope, group, args.lag_events, rate)])
                    runs.append(lag)
            for rate, runs in lags.items():
                name = f"loop_lag_at_{int(rate)}_per_s" if rate else "loop_lag_flat_out"
                results[name] = {k: round(median([r[k] for r in runs]), 2) for k in runs[0]}
                results[name]["p99_ms_runs"] = [round(r["p99_ms"], 2) for r in runs]
    results["load_average_1min"] = {"before": loaded, "after": round(os.getloadavg()[0], 2)}
    emit("aio_reader", results)


if __name__ == "__main__":
    main()
