"""Contention on a real Redis: OS processes and threads, with and without compaction."""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Callable
from typing import Any

import pytest

from statesync import StateSynchronizer
from tests.support.model import ALL_TYPES, Add

WORKERS = 8
UPDATES_EACH = 200


def add_ones(url: str, name: str, count: int) -> list[int]:
    """Do ``count`` conditional ``Add(1)``; return the revision each one landed at."""
    with StateSynchronizer.from_url(url, name, update_types=ALL_TYPES) as sync:
        sync.fetch_updates()
        landed = []
        for _ in range(count):
            sync.update_state(lambda state: [Add(1)])
            landed.append(sync.revision)
        return landed


def _process_worker(url: str, name: str, count: int, results: Any) -> None:
    results.put(add_ones(url, name, count))


def assert_every_update_landed_once(url: str, name: str, per_worker: list[list[int]]) -> None:
    for revisions in per_worker:
        assert revisions == sorted(revisions) and len(set(revisions)) == len(revisions)
    every = sorted(r for revisions in per_worker for r in revisions)
    assert every == list(range(1, WORKERS * UPDATES_EACH + 1))  # each revision won exactly once
    with StateSynchronizer.from_url(url, name, update_types=ALL_TYPES) as check:
        check.fetch_updates()
        assert check.state == {"total": WORKERS * UPDATES_EACH}
        assert check.revision == WORKERS * UPDATES_EACH


def run_threads(target: Callable[[], list[int]], count: int) -> list[list[int]]:
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(target())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    return results


@pytest.mark.slow
def test_eight_processes_count_to_exactly_1600(redis_url: str, unique_name: str) -> None:
    with StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES) as sync:
        sync.initialize({"total": 0})
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_process_worker, args=(redis_url, unique_name, UPDATES_EACH, results))
        for _ in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    per_worker = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    assert_every_update_landed_once(redis_url, unique_name, per_worker)


def test_eight_threads_count_to_exactly_1600(redis_url: str, unique_name: str) -> None:
    with StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES) as sync:
        sync.initialize({"total": 0})
    per_worker = run_threads(lambda: add_ones(redis_url, unique_name, UPDATES_EACH), WORKERS)
    assert_every_update_landed_once(redis_url, unique_name, per_worker)


def test_one_instance_shared_by_threads(redis_url: str, unique_name: str) -> None:
    with StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES) as shared:
        shared.initialize({"total": 0})

        def work() -> list[int]:
            landed = []
            for _ in range(50):
                landed.append(shared.update_state(lambda s: ([Add(1)], s["total"] + 1)))
            return landed

        results = run_threads(work, 4)
        assert sorted(v for r in results for v in r) == list(range(1, 201))
        assert shared.state == {"total": 200}


def test_compaction_while_others_update_and_fetch(redis_url: str, unique_name: str) -> None:
    with StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES) as sync:
        sync.initialize({"total": 0})
    stop = threading.Event()
    compactions: list[int] = []
    observed: list[int] = []

    def compactor() -> None:
        with StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES) as c:
            while not stop.is_set():
                if c.compact().compacted:
                    compactions.append(c.revision)
                c.wait_for_updates(0.05)

    def follower() -> None:
        with StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES) as f:
            f.fetch_updates()
            while not stop.is_set():
                if f.wait_for_updates(0.05):
                    f.fetch_updates()
                    observed.append(f.state["total"])
                    assert f.state["total"] == f.revision  # every entry is one Add(1)

    background = [threading.Thread(target=compactor), threading.Thread(target=follower)]
    for thread in background:
        thread.start()
    try:
        per_worker = run_threads(lambda: add_ones(redis_url, unique_name, UPDATES_EACH), WORKERS)
    finally:
        stop.set()
        for thread in background:
            thread.join(30)
    assert_every_update_landed_once(redis_url, unique_name, per_worker)
    assert len(compactions) >= 2, "the compactor should have truncated while others worked"
    assert observed == sorted(observed)  # a follower's view only moves forward
