"""Chaos run: readers are killed and restarted, the stream scales up and down, and Redis
restarts, while a writer writes; then the history checker (``tools/chaos_check.py``) judges it.

    python -m tools.chaos [--seconds 60] [--readers 8] [--segments 16]
    python -m tools.chaos ha [--seconds 40] [--acks leader|replicas=1] [--lag 2]

(``ha``: failovers of a Sentinel-managed primary/replica pair, one with a lagging replica; see
``tools/chaos_ha.py``.)

A private Redis with an append-only file (fsync always) is started for the run. A reader is
SIGKILLed every ``--kill-every`` seconds and restarted under the same id; the stream splits a
segment at 30% of the run and merges two at 65%; Redis is stopped and started at 50%. One more
reader (``p0``) talks to Redis through a proxy that blackholes every byte for 2.5 session
timeouts from 40% of the run: it is fenced, and rejoins by itself once the partition heals. A
second writer runs with a metadata TTL of 0, so its metadata has expired when Redis restarts.
Prints the figures as JSON and exits non-zero if any event was lost, reordered within an
ownership, or handed out by two live readers at once, or if a writer future failed before its
``delivery_timeout``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from readergroup import (  # noqa: E402
    ClientConfig,
    EventStreamClientFactory,
    EventWriterConfig,
    ReaderAlreadyOnlineError,
    ReaderGroupConfig,
    ReaderGroupError,
    ReaderGroupManager,
    ReaderNotInGroupError,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
    WriteFuture,
)
from readergroup.aio import AsyncEventStreamClientFactory  # noqa: E402
from readergroup.testing.embedded_redis import local_redis_server  # noqa: E402
from tests.support.proxy import ReplyDroppingProxy  # noqa: E402
from tools.chaos_check import Delivery, check  # noqa: E402

KEYS = 64
DELIVERY_TIMEOUT = EventWriterConfig().delivery_timeout


class WriteLog:
    """One writer's acknowledged events (``out``) and failed futures (``out.failed``: event,
    seconds from ``write_event`` to the failure, error). Thread-safe: futures settle on the
    writer's sender thread."""

    def __init__(self, out: str) -> None:
        self._acked = open(out, "a", encoding="utf-8")  # noqa: SIM115
        self._failed = open(out + ".failed", "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def settle(self, event: str, written: float, future: WriteFuture) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self._acked.write(event + "\n")
            else:
                age = round(time.monotonic() - written, 3)
                self._failed.write(json.dumps([event, age, repr(error)]) + "\n")

    def flush(self) -> None:
        with self._lock:
            self._acked.flush()
            self._failed.flush()

    def unresolved(self, event: str) -> None:
        """A future neither acknowledged nor failed in time (counted as failed early)."""
        with self._lock:
            self._failed.write(json.dumps([event, -1, "unresolved"]) + "\n")

    def close(self) -> None:
        with self._lock:
            self._acked.close()
            self._failed.close()


def writer_main(url: str, out: str, stop_file: str, kind: str = "main") -> None:
    """Write ``k<key>:<seq>`` (64 at a time, then wait for them); survive Redis restarts.

    The ``stale`` writer (``m<key>:<seq>``) has a metadata TTL of 0 and writes one event every
    2 ms without waiting, so rounds keep starting, each with expired metadata, while Redis
    restarts."""
    stale = kind == "stale"
    prefix, config = ("m", ClientConfig(metadata_ttl=0.0)) if stale else ("k", None)
    log = WriteLog(out)
    with EventStreamClientFactory.from_url("chaos", url, config) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        seq = 0
        while not Path(stop_file).exists():
            futures = []
            for key in range(KEYS):
                event = f"{prefix}{key}:{seq}"
                try:
                    future = writer.write_event(event, routing_key=f"{prefix}{key}")
                except ReaderGroupError:
                    time.sleep(0.1)
                    continue
                future.add_done_callback(functools.partial(log.settle, event, time.monotonic()))
                futures.append((event, future))
                if stale:
                    time.sleep(0.002)
            for event, future in [] if stale else futures:  # the stale writer never waits
                try:
                    future.exception(timeout=180)
                except TimeoutError:
                    log.unresolved(event)
            log.flush()
            seq += 1
            time.sleep(0.01)
        with contextlib.suppress(ReaderGroupError):  # close re-raises a failure: logged already
            writer.close()
    log.close()


def reader_main(url: str, reader_id: str, out: str, stop_file: str) -> None:
    """Deliver events, logging (reader, token, segment, offset, event, time) before moving on."""
    log = open(out, "a", encoding="utf-8")  # noqa: SIM115
    with EventStreamClientFactory.from_url("chaos", url) as factory:
        deadline = time.monotonic() + 60
        while True:  # a restarted id waits for its previous session to expire
            try:
                reader = factory.create_reader(reader_id, "g", UTF8StringSerializer())
                break
            except (ReaderAlreadyOnlineError, ReaderGroupError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        while not Path(stop_file).exists():
            try:
                batch = reader.read_batch(100, timeout=0.2)
            except ReaderNotInGroupError:
                reader.rejoin()  # fenced (a partition outlasted the session): a new generation
                continue
            except ReaderGroupError:
                time.sleep(0.2)  # Redis is restarting: back off and try again
                continue
            now = time.time()
            for e in batch:
                log.write(
                    json.dumps([reader_id, e.fencing_token, e.segment, e.offset, e.event, now])
                    + "\n"
                )
            log.flush()
            os.fsync(log.fileno())
        reader.close()
    log.close()


def aio_reader_main(url: str, reader_id: str, out: str, stop_file: str) -> None:
    """:func:`reader_main` with an asyncio reader (``async``/``await``, one event loop): the
    group mixes threaded and asyncio readers (issue 29)."""
    asyncio.run(_aio_reader(url, reader_id, out, stop_file))


async def _aio_reader(url: str, reader_id: str, out: str, stop_file: str) -> None:
    log = open(out, "a", encoding="utf-8")  # noqa: SIM115
    async with AsyncEventStreamClientFactory.from_url("chaos", url) as factory:
        deadline = time.monotonic() + 60
        while True:  # a restarted id waits for its previous session to expire
            try:
                reader = await factory.create_reader(reader_id, "g", UTF8StringSerializer())
                break
            except (ReaderAlreadyOnlineError, ReaderGroupError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        while not Path(stop_file).exists():
            try:
                batch = await reader.read_batch(100, timeout=0.2)
            except ReaderNotInGroupError:
                await reader.rejoin()  # fenced: a new generation
                continue
            except ReaderGroupError:
                await asyncio.sleep(0.2)  # Redis is restarting: back off and try again
                continue
            now = time.time()
            for e in batch:
                log.write(
                    json.dumps([reader_id, e.fencing_token, e.segment, e.offset, e.event, now])
                    + "\n"
                )
            log.flush()
            os.fsync(log.fileno())
        await reader.close()
    log.close()


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tools.chaos", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


class ChaosRun:
    """One run: a private Redis, a writer, reader processes, and the disturbances."""

    def __init__(self, readers: int, segments: int, work: Path, url: str) -> None:
        self.work, self.url = work, url
        self.stop_file = str(work / "stop")
        self.rng = random.Random(7)
        self.kills = self.scales = self.restarts = 0
        with StreamManager.from_url(url) as sm:
            sm.create_scope("chaos")
            config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
            sm.create_stream("chaos", "s", config)
        with ReaderGroupManager.from_url("chaos", url) as rgm:
            group = ReaderGroupConfig(
                streams=["chaos/s"],
                heartbeat_interval=0.5,
                session_timeout=2.0,
                group_refresh_time=0.1,
                auto_commit_interval=0.2,
            )
            rgm.create_reader_group("g", group)
        self.session_timeout = group.session_timeout
        self.partitions = 0
        host, port = url.split("//")[1].split("/", maxsplit=1)[0].rsplit(":", 1)
        self.proxy = ReplyDroppingProxy(host, int(port))
        self.writer = spawn("writer", url, str(work / "acked.log"), self.stop_file)
        # a second writer whose metadata has always expired, also during the Redis restart
        self.stale = spawn("writer", url, str(work / "stale.acked"), self.stop_file, "stale")
        self.procs = {f"r{i}": self.reader(f"r{i}") for i in range(readers)}
        self.procs["p0"] = self.reader("p0")

    def wait_for_writers(self) -> None:
        """Until both writers have had events acknowledged (the schedule starts after that)."""
        logs = [self.work / "acked.log", self.work / "stale.acked"]
        deadline = time.monotonic() + 120
        while not all(path.exists() and path.stat().st_size for path in logs):
            if time.monotonic() > deadline:
                raise RuntimeError("the writers did not start within 120 s")
            time.sleep(0.05)

    def reader(self, name: str) -> subprocess.Popen[bytes]:
        url = self.proxy.url if name.startswith("p") else self.url
        # every other reader is an asyncio one: a mixed group (issue 29)
        kind = "aio-reader" if name[-1] in "13579" else "reader"
        return spawn(kind, url, name, str(self.work / f"{name}.log"), self.stop_file)

    def partition(self) -> float:
        """Blackhole the proxied reader's traffic; returns when to heal (2.5 sessions on)."""
        self.proxy.blackhole(True)
        self.partitions += 1
        return time.monotonic() + 2.5 * self.session_timeout

    def kill_one(self) -> None:
        victim = self.rng.choice(sorted(p for p in self.procs if not p.startswith("p")))
        self.procs[victim].send_signal(signal.SIGKILL)
        self.procs[victim].wait(10)
        self.procs[victim] = self.reader(victim)  # the same id rejoins once its session expired
        self.kills += 1

    def split(self) -> None:
        with StreamManager.from_url(self.url) as sm:
            record = sm.stream_state("chaos", "s").active_segments[0]
            middle = (record.low + record.high) / 2
            ranges = [(record.low, middle), (middle, record.high)]
            sm.scale_stream("chaos", "s", [record.segment_id], ranges)
        self.scales += 1

    def merge(self) -> None:
        with StreamManager.from_url(self.url) as sm:
            a, b = sm.stream_state("chaos", "s").active_segments[-2:]
            sm.scale_stream("chaos", "s", [a.segment_id, b.segment_id], [(a.low, b.high)])
        self.scales += 1

    def finish(self) -> list[str]:
        """Stop everyone; drain with fresh readers until every acknowledged event is read."""
        Path(self.stop_file).touch()
        self.writer.wait(120)
        self.stale.wait(120)
        for proc in self.procs.values():
            proc.wait(60)
        acked = [
            *(self.work / "acked.log").read_text().split(),
            *(self.work / "stale.acked").read_text().split(),
        ]
        if set(acked) - {d.event for d in load(self.work)}:
            Path(self.stop_file).unlink()
            drainers = [self.reader(f"drain{i}") for i in range(2)]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and set(acked) - {d.event for d in load(self.work)}:
                time.sleep(0.5)
            Path(self.stop_file).touch()
            for proc in drainers:
                proc.wait(60)
        return acked


def run(
    seconds: float, readers: int, segments: int, kill_every: float, work: Path
) -> dict[str, Any]:
    with local_redis_server(persistent=True) as server:
        chaos = ChaosRun(readers, segments, work, server.url)
        chaos.wait_for_writers()
        began = time.monotonic()
        next_kill = began + kill_every
        steps: list[tuple[float, Callable[[], Any]]] = [
            (0.4, chaos.partition),
            (0.3, chaos.split),
            (0.5, server.restart),
            (0.65, chaos.merge),
        ]
        heal_at = healed_wall = float("inf")
        while time.monotonic() - began < seconds or heal_at < float("inf"):
            if time.monotonic() >= heal_at:
                chaos.proxy.blackhole(False)
                healed_wall = time.time()
                heal_at = float("inf")
            if time.monotonic() >= next_kill:
                chaos.kill_one()
                next_kill += kill_every
            while steps and (time.monotonic() - began) / seconds >= steps[0][0]:
                action = steps.pop(0)[1]
                # a partition, a split, a Redis restart (SIGTERM, AOF flushed, same port), a merge
                result = action()
                if action == chaos.partition:
                    heal_at = float(result)
                if action == server.restart:
                    chaos.restarts += 1
            time.sleep(0.05)
        acked = chaos.finish()
        chaos.proxy.close()
        deliveries = load(work)
        report = check(acked, deliveries, write_failure_ages(work), DELIVERY_TIMEOUT)
        after_heal = [d for d in deliveries if d.reader == "p0" and d.at > healed_wall]
    figures = report.as_dict()
    figures.update(
        seconds=seconds,
        readers=readers,
        segments=segments,
        kills=chaos.kills,
        scales=chaos.scales,
        redis_restarts=chaos.restarts,
        reader_partitions=chaos.partitions,
        partitioned_reader_events_after_heal=len(after_heal),
        asyncio_reader_deliveries=sum(d.reader[-1] in "13579" for d in deliveries),
        ok=report.ok,
    )
    return figures


def write_failure_ages(work: Path) -> list[float]:
    """Seconds from ``write_event`` to the failure of each failed future, both writers."""
    ages = []
    for path in work.glob("*.failed"):
        for line in path.read_text().splitlines():
            ages.append(float(json.loads(line)[1]))
    return ages


def load(work: Path) -> list[Delivery]:
    rows = []
    for path in work.glob("*.log"):
        if path.name == "acked.log":
            continue
        for line in path.read_text().splitlines():
            try:
                reader, token, segment, offset, event, at = json.loads(line)
            except ValueError:
                continue  # a line cut short by SIGKILL
            rows.append(Delivery(reader, token, segment, offset, event, at))
    return rows


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "writer":
        writer_main(*sys.argv[2:6])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "reader":
        reader_main(*sys.argv[2:6])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "aio-reader":
        aio_reader_main(*sys.argv[2:6])
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "ha":  # failovers of a replicated Redis
        from tools import chaos_ha

        return chaos_ha.main(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--segments", type=int, default=16)
    parser.add_argument("--kill-every", type=float, default=2.0)
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="chaos-") as work:
        figures = run(args.seconds, args.readers, args.segments, args.kill_every, Path(work))
    print(json.dumps(figures, indent=2, sort_keys=True))
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
