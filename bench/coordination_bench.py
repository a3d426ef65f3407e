"""Reader-group coordination at scale: how fast segments find owners (issue 15).

In one run, against one server, readers as threads of this process unless said otherwise
(default configuration):

* ``lone_reader``: seconds from ``create_reader`` until one reader owns every segment of a
  group over 1,024 segments (one stream) and 4,096 segments (four streams of 1,024: the
  per-stream cap).
* ``many_readers``: 128 readers start together on 1,024 segments; seconds from the last join
  until every reader owns 8 (+-1), with the conditional appends that conflicted and the log
  entries the readers appended meanwhile (from the synchronizers' counters).
* ``many_readers_in_processes``: the same with the readers split over 4 processes (as the
  issue measured it), conflicts and log entries counted over the whole run.
* ``one_more_reader``: a ninth reader joins eight balanced readers on 1,024 segments; seconds
  until it owns its share (113 or 114) and the group is balanced.
* ``idle_commands``: 8 balanced readers on 1,024 segments, no events, each reading in a loop
  with the default timeout (``group_refresh_time``, 0.5 s) and with a 3 s timeout: Redis
  commands per reader per second from ``INFO commandstats`` (commands run inside scripts
  counted), and the group-log reads and appends per reader per second from the
  synchronizers' counters.
* ``flowing_commands``: the same with 500 events/s written over the 1,024 segments, for
  R = 8/32/64/128 readers: group-log reads and appends per reader per second (coordination
  cost, independent of R when commits wake nobody) and every Redis command per reader per
  second.

Prints JSON.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections.abc import Callable
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
from readergroup.core.errors import ReaderGroupError
from readergroup.testing.embedded_redis import redis_server

PER_STREAM = 1024


class Readers:
    """Reader threads of one group, each with its own client factory (connections): each joins,
    then reads (and so maintains its membership) until stopped."""

    def __init__(self, url: str, scope: str, group: str, read_timeout: float | None = 0.2) -> None:
        self._url, self._scope, self._group = url, scope, group
        self._read_timeout = read_timeout
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.readers: list[Any] = []
        self.failures: list[str] = []

    def start(self, reader_id: str, together: threading.Barrier | None = None) -> None:
        thread = threading.Thread(target=self._run, args=(reader_id, together), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run(self, reader_id: str, together: threading.Barrier | None) -> None:
        with EventStreamClientFactory.from_url(self._scope, self._url) as factory:
            if together is not None:
                together.wait()
            try:
                reader = factory.create_reader(reader_id, self._group, BytesSerializer())
                with self._lock:
                    self.readers.append(reader)
                while not self._stop.is_set():
                    reader.read_next_event(timeout=self._read_timeout)
                reader.close()
            except ReaderGroupError as exc:  # reported in the JSON, not hidden
                with self._lock:
                    self.failures.append(f"{reader_id}: {type(exc).__name__}: {exc}")

    def sync_stats(self) -> tuple[int, int]:
        """(conflicts, appends) summed over every reader's synchronizer."""
        with self._lock:
            stats = [r._member.sync.stats for r in self.readers]
        return sum(s.conflicts for s in stats), sum(s.appends for s in stats)

    def log_calls(self) -> int:
        """Group-log reads plus appends (conflicting ones included), summed over readers."""
        with self._lock:
            stats = [r._member.sync.stats for r in self.readers]
        return sum(s.reads + s.appends + s.conflicts for s in stats)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def _setup(url: str, streams: int, session_timeout: float = 10.0) -> tuple[str, Any, Any]:
    scope = f"c{uuid.uuid4().hex[:6]}"
    names = [f"{scope}/s{i}" for i in range(streams)]
    policy = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(PER_STREAM))
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        for i in range(streams):
            sm.create_stream(scope, f"s{i}", policy)
    rgm = ReaderGroupManager.from_url(scope, url)
    config = ReaderGroupConfig(streams=names, session_timeout=session_timeout)
    rgm.create_reader_group("g", config)
    return scope, rgm, rgm.get_reader_group("g")


def _wait(condition: Callable[[], bool], limit: float = 300.0) -> float:
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > limit:
            raise TimeoutError(f"not reached within {limit} s")
        time.sleep(0.01)
    return time.monotonic() - began


def _balanced(group: Any, readers: int, segments: int) -> bool:
    """Whether ``readers`` readers own ``segments`` segments, +-1 each. Checked every 10 ms in
    this process, so cheaply: the group state's owner counts (O(R); the segment distribution
    sorts every segment, and polling it took a third of the readers' CPU at 128 readers)."""
    state = group.refresh()
    sizes = list(state.counts().values())
    return (
        len(sizes) == readers
        and sum(sizes) == segments
        and not state.unassigned
        and max(sizes) - min(sizes) <= 1
    )


def lone_reader(url: str, streams: int) -> float:
    scope, rgm, group = _setup(url, streams)
    readers = Readers(url, scope, "g")
    began = time.monotonic()
    readers.start("r0")
    _wait(lambda: _balanced(group, 1, streams * PER_STREAM))
    seconds = time.monotonic() - began
    readers.stop()
    if readers.failures:
        raise RuntimeError(f"the lone reader failed: {readers.failures}")
    rgm.close()
    return round(seconds, 3)


def many_readers(url: str, count: int, session_timeout: float) -> dict[str, Any]:
    scope, rgm, group = _setup(url, 1, session_timeout)
    readers = Readers(url, scope, "g")
    together = threading.Barrier(count)
    began = time.monotonic()
    for i in range(count):
        readers.start(f"r{i}", together)
    try:
        _wait(lambda: len(group.get_online_readers()) == count, limit=120)
        joined = time.monotonic() - began
        conflicts0, appends0 = readers.sync_stats()
        cpu0 = time.process_time()
        seconds = _wait(lambda: _balanced(group, count, PER_STREAM), limit=120)
        cpu = time.process_time() - cpu0
    except TimeoutError as exc:
        readers.stop()
        sizes = [len(s) for s in group.get_segment_distribution().assigned.values()]
        rgm.close()
        return {
            "readers": count,
            "timeout": str(exc),
            "online": len(sizes),
            "owned_min_max": [min(sizes, default=0), max(sizes, default=0)],
            "reader_failures": readers.failures[:5],
            "reader_failure_count": len(readers.failures),
        }
    conflicts, appends = readers.sync_stats()
    readers.stop()
    rgm.close()
    return {
        "readers": count,
        "session_timeout_s": session_timeout,
        "start_to_all_joined_s": round(joined, 3),
        "last_join_to_balanced_s": round(seconds, 3),
        "process_cpu_s_meanwhile": round(cpu, 2),
        "conflicting_appends_total": conflicts,
        "log_entries_total": appends,
        "conflicting_appends_after_last_join": conflicts - conflicts0,
        "log_entries_after_last_join": appends - appends0,
        "reader_failures": readers.failures,
    }


def _reader_process(
    url: str, scope: str, ids: list[str], start: Any, stop: Any, results: Any
) -> None:
    """One process of :func:`many_readers_in_processes`: its readers as threads, started when
    ``start`` is set and stopped when ``stop`` is; puts (conflicts, appends, CPU s, failures)."""
    readers = Readers(url, scope, "g")
    start.wait()
    began = time.process_time()
    together = threading.Barrier(len(ids))
    for reader_id in ids:
        readers.start(reader_id, together)
    stop.wait()
    conflicts, appends = readers.sync_stats()
    cpu = time.process_time() - began
    readers.stop()
    results.put((conflicts, appends, cpu, readers.failures))


def many_readers_in_processes(
    url: str, count: int, processes: int, session_timeout: float
) -> dict[str, Any]:
    """:func:`many_readers` with the readers split over ``processes`` processes (as the issue's
    own measurement: threads in up to 4 processes); conflicts and log entries over the whole
    run (joins included), and the readers' CPU summed over the processes."""
    import multiprocessing

    scope, rgm, group = _setup(url, 1, session_timeout)
    ctx = multiprocessing.get_context("spawn")
    start, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    ids = [f"r{i}" for i in range(count)]
    procs = [
        ctx.Process(
            target=_reader_process, args=(url, scope, ids[p::processes], start, stop, results)
        )
        for p in range(processes)
    ]
    for proc in procs:
        proc.start()
    time.sleep(3.0)  # let every interpreter import before the clock starts
    began = time.monotonic()
    start.set()
    outcome: dict[str, Any] = {"readers": count, "processes": processes}
    try:
        _wait(lambda: len(group.get_online_readers()) == count, limit=120)
        outcome["start_to_all_joined_s"] = round(time.monotonic() - began, 3)
        seconds = _wait(lambda: _balanced(group, count, PER_STREAM), limit=120)
        outcome["last_join_to_balanced_s"] = round(seconds, 3)
    except TimeoutError as exc:
        outcome["timeout"] = str(exc)
    stop.set()
    reports = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(60)
    rgm.close()
    outcome["conflicting_appends_total"] = sum(r[0] for r in reports)
    outcome["log_entries_total"] = sum(r[1] for r in reports)
    outcome["readers_cpu_s_whole_run"] = round(sum(r[2] for r in reports), 2)
    outcome["reader_failures"] = [f for r in reports for f in r[3]]
    return outcome


def one_more_reader(url: str, existing: int) -> dict[str, Any]:
    scope, rgm, group = _setup(url, 1)
    readers = Readers(url, scope, "g")
    for i in range(existing):
        readers.start(f"r{i}")
    _wait(lambda: _balanced(group, existing, PER_STREAM))
    began = time.monotonic()
    readers.start("newcomer")
    _wait(lambda: _balanced(group, existing + 1, PER_STREAM))
    seconds = time.monotonic() - began
    readers.stop()
    rgm.close()
    return {
        "readers_before": existing,
        "join_to_balanced_s": round(seconds, 3),
        "reader_failures": readers.failures,
    }


def _command_calls(url: str) -> dict[str, int]:
    """``INFO commandstats`` calls per command (commands inside scripts included)."""
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _commands_per_reader_second(
    url: str, readers: Readers, count: int, seconds: float
) -> dict[str, Any]:
    """Over ``seconds``: Redis commands and group-log calls per reader per second."""
    before, log_before = _command_calls(url), readers.log_calls()
    began = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - began
    after, log_after = _command_calls(url), readers.log_calls()
    calls = {k: v - before.get(k, 0) for k, v in after.items()}
    calls["info"] = calls.get("info", 0) - 1  # our own INFO
    per = count * elapsed
    top = sorted(((v, k) for k, v in calls.items() if v > 0), reverse=True)[:6]
    return {
        "readers": count,
        "redis_commands_per_reader_s": round(sum(calls.values()) / per, 2),
        "group_log_calls_per_reader_s": round((log_after - log_before) / per, 2),
        "top_commands_per_reader_s": {k: round(v / per, 2) for v, k in top},
    }


def idle_commands(
    url: str, count: int, seconds: float, read_timeout: float | None
) -> dict[str, Any]:
    scope, rgm, group = _setup(url, 1)
    readers = Readers(url, scope, "g", read_timeout=read_timeout)
    for i in range(count):
        readers.start(f"r{i}")
    try:
        _wait(lambda: _balanced(group, count, PER_STREAM), limit=120)
        time.sleep(1.0)  # settle: the last moves' wake-ups
        return _commands_per_reader_second(url, readers, count, seconds)
    finally:
        readers.stop()
        rgm.close()


def flowing_commands(url: str, count: int, seconds: float, rate: int) -> dict[str, Any]:
    scope, rgm, group = _setup(url, 1, session_timeout=30.0)
    readers = Readers(url, scope, "g", read_timeout=None)
    for i in range(count):
        readers.start(f"r{i}")
    stop = threading.Event()

    def write() -> None:
        with EventStreamClientFactory.from_url(scope, url) as factory:
            writer = factory.create_event_writer("s0", BytesSerializer())
            tick, n = 0.1, 0
            while not stop.is_set():
                began = time.monotonic()
                for _ in range(max(1, int(rate * tick))):
                    writer.write_event(b"x" * 64, routing_key=f"k{n}")
                    n += 1
                writer.flush()
                stop.wait(max(0.0, tick - (time.monotonic() - began)))
            writer.close()

    thread = threading.Thread(target=write, daemon=True)
    try:
        _wait(lambda: _balanced(group, count, PER_STREAM), limit=180)
        thread.start()
        time.sleep(2.0)  # settle: events flowing and committed
        return {"events_per_s": rate, **_commands_per_reader_second(url, readers, count, seconds)}
    finally:
        stop.set()
        thread.join(30)
        readers.stop()
        rgm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=128)
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        help="of the many-readers group (all readers share this process's two cores)",
    )
    parser.add_argument("--only", help="measure only the part whose name contains this")
    parser.add_argument("--window", type=float, default=10.0, help="seconds counted")
    parser.add_argument(
        "--flowing-readers", default="8,32,64,128", help="R values of flowing_commands"
    )
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with redis_server() as server:
        results["server"] = server.kind
        parts: list[tuple[str, Callable[[], Any]]] = [
            ("lone_reader_1024_segments_s", lambda: lone_reader(server.url, 1)),
            ("lone_reader_4096_segments_s", lambda: lone_reader(server.url, 4)),
            (
                "many_readers_1024_segments",
                lambda: many_readers(server.url, args.readers, args.session_timeout),
            ),
            (
                "many_readers_1024_segments_4_processes",
                lambda: many_readers_in_processes(
                    server.url, args.readers, 4, args.session_timeout
                ),
            ),
            ("one_more_reader_1024_segments", lambda: one_more_reader(server.url, 8)),
            (
                "idle_commands_8_readers",
                lambda: idle_commands(server.url, 8, args.window, None),
            ),
            (
                "idle_commands_8_readers_3s_reads",
                lambda: idle_commands(server.url, 8, args.window, 3.0),
            ),
        ]
        for r in (int(x) for x in args.flowing_readers.split(",") if x):
            parts.append(
                (
                    f"flowing_commands_{r}_readers",
                    lambda r=r: flowing_commands(server.url, r, args.window, 500),
                )
            )
        for name, measure in parts:
            if args.only and args.only not in name:
                continue
            results[name] = measure()
            print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
    emit("coordination", results)


if __name__ == "__main__":
    main()
