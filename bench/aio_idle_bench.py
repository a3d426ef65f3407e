"""asyncio idle-readers benchmark (issue 29): many idle asyncio readers in one event loop.

``--readers`` asyncio readers of one group over ``--segments`` segments in ONE process and one
event loop, each reading in a task of its own (``--mode read``: a loop of
``read_next_event(timeout=--timeout)``; ``--mode iterate``: ``async for event in reader``, no
read timeout of its own), and nothing written. Once every reader owns its fair share (and
``--settle`` s more), over
``--idle`` seconds: the process's CPU as a share of one core (the goal: <= 5%) and the server's
commands per reader per second (``INFO stats``: only this group's readers talk to it; and per
command, ``INFO commandstats``, commands inside scripts counted); then over another ``--idle``
seconds the event loop's p99 lag (a probe task asking to run every 1 ms) and the loop's
callbacks (wake-ups) and timers scheduled per reader per second. Then the same commands figure for
``--sync-readers`` threaded readers of another group over as many segments (the goal: async <=
sync), each in a process of its own, one after the other. ``--profile N``: print the N
costliest functions (cProfile, cumulative) of the idle window instead of the timing figures.

Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.aio_reader_bench import _commands, _group, _p99_ms, _stream
from bench.common import emit, probe_loop_lag, run_processes
from bench.coordination_bench import _command_calls
from readergroup import BytesSerializer, EventStreamClientFactory, StreamManager
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.testing.embedded_redis import local_redis_server


def _per_reader(before: dict[str, int], after: dict[str, int], readers: int, s: float) -> Any:
    """Each command's calls per reader per second between two ``INFO commandstats``."""
    rates = {k: (n - before.get(k, 0)) / readers / s for k, n in after.items()}
    return {k: round(v, 3) for k, v in sorted(rates.items()) if v >= 0.0005}


class LoopCounts:
    """Callbacks run and timers scheduled by the running event loop (counted by wrapping
    ``Handle._run`` and ``loop.call_at``: a bench's instrument, never the library's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.callbacks = self.timers = 0
        self.counting = False
        run = asyncio.Handle._run
        call_at = loop.call_at
        counts = self

        def counted_run(handle: asyncio.Handle) -> None:
            if counts.counting:
                counts.callbacks += 1
            run(handle)

        def counted_call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            if counts.counting:
                counts.timers += 1
            return call_at(when, callback, *args, **kwargs)

        asyncio.Handle._run = counted_run  # type: ignore[method-assign,assignment]
        loop.call_at = counted_call_at  # type: ignore[method-assign,assignment]


def _idle_async(
    url: str,
    scope: str,
    group: str,
    options: dict[str, Any],
    start: Any,
    out: Any,
) -> None:
    start.wait()
    readers, segments = options["readers"], options["segments"]

    async def main() -> dict[str, Any]:
        counts = LoopCounts(asyncio.get_running_loop())
        lags: list[float] = []

        async with AsyncEventStreamClientFactory.from_url(scope, url) as factory:
            made = []
            stop = asyncio.Event()

            async def read(reader: Any) -> None:
                if options["mode"] == "iterate":
                    async for _event in reader:
                        pass
                    return
                while not stop.is_set():
                    await reader.read_next_event(timeout=options["timeout"])

            tasks = []
            for n in range(readers):
                reader = await factory.create_reader(f"r{n}", group, BytesSerializer())
                made.append(reader)
                tasks.append(asyncio.create_task(read(reader)))
            low, high = segments // readers, -(-segments // readers)
            while (
                not all(low <= len(r.assignment()) <= high for r in made)
                or sum(len(r.assignment()) for r in made) != segments
            ):
                await asyncio.sleep(0.01)
            await asyncio.sleep(options["settle"])
            # window 1: CPU and commands, nothing of the bench's own in the loop
            profiler = cProfile.Profile() if options["profile"] else None
            by_name = _command_calls(url)
            commands, cpu, began = _commands(url), time.process_time(), time.perf_counter()
            if profiler is not None:
                profiler.enable()
            await asyncio.sleep(options["idle"])
            if profiler is not None:
                profiler.disable()
            elapsed = time.perf_counter() - began
            cpu_share = (time.process_time() - cpu) / elapsed
            per_reader = (_commands(url) - commands) / readers / elapsed
            by_name = _per_reader(by_name, _command_calls(url), readers, elapsed)
            result: dict[str, Any] = {
                "idle_cpu_share_of_one_core": round(cpu_share, 3),
                "idle_commands_per_reader_per_s": round(per_reader, 2),
                "idle_commands_per_reader_per_s_by_name": by_name,
            }
            # window 2: the loop's lag (the probe) and its callbacks and timers, less the
            # probe's own (a timer and two callbacks per turn)
            probing = asyncio.create_task(probe_loop_lag(lags))
            await asyncio.sleep(0.1)
            lags[:] = []
            counts.counting, began = True, time.perf_counter()
            await asyncio.sleep(options["idle"])
            counts.counting = False
            elapsed, turns = time.perf_counter() - began, len(lags)
            probing.cancel()
            result["loop_lag_p99_ms"] = round(_p99_ms(lags), 2)
            callbacks = (counts.callbacks - 2 * turns) / readers / elapsed
            result["loop_callbacks_per_reader_per_s"] = round(callbacks, 1)
            timers = (counts.timers - turns) / readers / elapsed
            result["loop_timers_per_reader_per_s"] = round(timers, 1)
            stop.set()
            for reader in made:
                reader.stop_iteration()
            await asyncio.gather(*tasks)
            if profiler is not None:
                text = io.StringIO()
                stats = pstats.Stats(profiler, stream=text)
                stats.sort_stats("tottime").print_stats(options["profile"])
                stats.sort_stats("cumulative").print_stats(options["profile"])
                result["profile"] = text.getvalue()
            return result

    out.put(asyncio.run(main()))


def _idle_sync(
    url: str, scope: str, group: str, options: dict[str, Any], start: Any, out: Any
) -> None:
    start.wait()
    readers = options["sync_readers"]
    stop = threading.Event()
    with EventStreamClientFactory.from_url(scope, url) as factory:
        made = [factory.create_reader(f"r{n}", group, BytesSerializer()) for n in range(readers)]

        def read(reader: Any) -> None:
            while not stop.is_set():
                reader.read_next_event(timeout=options["timeout"])

        threads = [threading.Thread(target=read, args=(r,)) for r in made]
        for thread in threads:
            thread.start()
        time.sleep(3 + options["settle"])  # balanced and settled
        by_name = _command_calls(url)
        commands, cpu, began = _commands(url), time.process_time(), time.perf_counter()
        time.sleep(options["idle"])
        elapsed = time.perf_counter() - began
        per_reader = (_commands(url) - commands) / readers / elapsed
        by_name = _per_reader(by_name, _command_calls(url), readers, elapsed)
        cpu_share = (time.process_time() - cpu) / elapsed
        stop.set()
        for thread in threads:
            thread.join(10)
    out.put(
        {
            "idle_commands_per_reader_per_s": round(per_reader, 2),
            "idle_commands_per_reader_per_s_by_name": by_name,
            "idle_cpu_share_of_one_core": round(cpu_share, 3),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--sync-readers", type=int, default=20)
    parser.add_argument("--segments", type=int, default=1024)
    parser.add_argument("--mode", choices=("read", "iterate"), default="read")
    parser.add_argument("--timeout", type=float, default=0.5)
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--parts", default="async,async_as_many_as_sync,sync")
    args = parser.parse_args()
    options = vars(args)
    parts = args.parts.split(",")
    results: dict[str, Any] = {
        "readers": args.readers,
        "segments": args.segments,
        "mode": args.mode,
        "timeout": args.timeout if args.mode == "read" else None,
    }
    with local_redis_server() as server:
        url, scope = server.url, f"b{uuid.uuid4().hex[:8]}"
        with StreamManager.from_url(url) as manager:
            manager.create_scope(scope)
        for part in parts:
            stream = _stream(url, scope, args.segments, 0)
            group = _group(url, scope, stream)
            if part == "sync":
                (result,) = run_processes(_idle_sync, [(url, scope, group, options)])
                results[f"sync_{args.sync_readers}_readers"] = result
                continue
            few = part == "async_as_many_as_sync"
            part_options = {**options, "readers": args.sync_readers if few else args.readers}
            (result,) = run_processes(_idle_async, [(url, scope, group, part_options)])
            if "profile" in result:
                print(result.pop("profile"), file=sys.stderr)
            results[f"async_{part_options['readers']}_readers"] = result
    emit("aio_idle", results)


if __name__ == "__main__":
    main()
