"""Helpers shared by the benchmarks: a Redis to measure against, timing, JSON output."""

from __future__ import annotations

import json
import multiprocessing as mp
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


def run_processes(
    target: Callable[..., None], args_per_process: Sequence[tuple[Any, ...]]
) -> list[Any]:
    """Start one spawned process per argument tuple, release them together, collect results.

    Each target is called as ``target(*args, start_event, results_queue)`` and must put one
    result on the queue. Returns the results in completion order.
    """
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, start, results)) for args in args_per_process]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # let every interpreter finish importing before the clock starts
    start.set()
    collected = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(60)
    return collected


async def probe_loop_lag(lags: list[float]) -> None:
    """Ask the running event loop to run this task every 1 ms, appending each turn's lag (s
    past the millisecond) to ``lags``, until cancelled."""
    import asyncio

    while True:
        before = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - before - 0.001)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def emit(name: str, results: dict[str, Any]) -> None:
    """Print the benchmark's JSON document on stdout."""
    document = {
        "benchmark": name,
        "python": platform.python_version(),
        "machine": {"cpus": __import__("os").cpu_count(), "platform": sys.platform},
        "results": results,
    }
    print(json.dumps(document, indent=2, sort_keys=True))


Figures = dict[str, dict[str, list[float]]]
"""Per path, the runs' ``rate``, ``cpu`` (per unit of work), ``lag`` and ``idle`` figures."""


def new_figures(paths: Sequence[str]) -> Figures:
    return {path: {"rate": [], "cpu": [], "lag": [], "idle": []} for path in paths}


def add_run(figures: Figures, result: dict[str, Any], count: int, cpu_scale: float) -> None:
    """Record one run of ``result["path"]`` that did ``count`` units of work: its rate, its
    client CPU per unit times ``cpu_scale``, and its loop lag figures."""
    runs = figures[result["path"]]
    runs["rate"].append(count / result["seconds"])
    runs["cpu"].append(result["cpu"] / count * cpu_scale)
    runs["lag"].append(result["lag"])
    runs["idle"].append(result["idle"])


def async_vs_sync(
    figures: Figures,
    modes: Sequence[str],
    *,
    rate: str,
    cpu: str,
    rate_digits: int | None = 1,
) -> dict[str, Any]:
    """The medians of each path's runs (``figures[path]`` holds lists ``rate``, ``cpu``,
    ``lag`` and ``idle``; ``lag``/``idle`` are reported for the ``async_*`` paths only, as the
    loop's p99 lag while measuring and just before), named ``rate`` and ``cpu``, and for each
    mode the ratios ``async_<mode>`` over ``sync_<mode>``."""
    results: dict[str, Any] = {
        path: {
            rate: round(median(values["rate"]), rate_digits),
            cpu: round(median(values["cpu"]), 3),
            **(
                {
                    "loop_lag_p99_ms": round(median(values["lag"]), 2),
                    "loop_lag_p99_ms_idle_baseline": round(median(values["idle"]), 2),
                }
                if path.startswith("async")
                else {}
            ),
        }
        for path, values in figures.items()
    }
    for mode in modes:
        sync, aio = results[f"sync_{mode}"], results[f"async_{mode}"]
        results[f"ratio_{mode}"] = {
            f"{rate}_async_over_sync": round(aio[rate] / sync[rate], 2),
            "client_cpu_async_over_sync": round(aio[cpu] / sync[cpu], 2),
        }
    return results
