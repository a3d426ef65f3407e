"""Reader groups across OS processes on a real Redis: balance, SIGKILL, scaling, SIGSTOP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
SESSION = 2.0
TIMING = {
    "heartbeat_interval": 0.3,
    "session_timeout": SESSION,
    "group_refresh_time": 0.1,
    "auto_commit_interval": 0.2,
}

pytestmark = pytest.mark.slow


class Cluster:
    """Reader processes of one group, and the group's view of them."""

    def __init__(self, url: str, scope: str, out: Path) -> None:
        self.url, self.scope, self.out = url, scope, out
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.group = ReaderGroupManager.from_url(scope, url).get_reader_group("g")

    def start(self, reader_id: str) -> None:
        self.procs[reader_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.reader_process",
                self.url,
                self.scope,
                "g",
                reader_id,
                str(self.out),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def sizes(self) -> dict[str, int]:
        dist = self.group.get_segment_distribution()
        return {r: len(s) for r, s in dist.assigned.items()}

    def balanced(self, readers: int, segments: int) -> bool:
        dist = self.group.get_segment_distribution()
        sizes = [len(s) for s in dist.assigned.values()]
        return (
            len(sizes) == readers
            and sum(sizes) == segments
            and not dist.unassigned
            and max(sizes) - min(sizes) <= 1
        )

    def events(self) -> list[dict[str, Any]]:
        rows = []
        for path in self.out.glob("*.events"):
            for line in path.read_text().splitlines():
                if line.strip():
                    rows.append(json.loads(line))
        return rows

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def cluster(redis_url: str, scope: str, tmp_path: Path) -> Iterator[Cluster]:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(8)))
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **TIMING))
    c = Cluster(redis_url, scope, tmp_path)
    try:
        yield c
    finally:
        c.stop_all()


class Writer:
    """Writes ``key:seq`` events for 32 keys in a background thread until stopped."""

    def __init__(self, url: str, scope: str) -> None:
        self.factory = EventStreamClientFactory.from_url(scope, url)
        self.writer = self.factory.create_event_writer("s", UTF8StringSerializer())
        self.written: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            for key in range(32):
                event = f"k{key}:{seq}"
                self.writer.write_event(event, routing_key=f"k{key}")
                self.written.append(event)
            self.writer.flush()
            seq += 1
            time.sleep(0.01)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        self.writer.close()
        self.factory.close()


def test_four_readers_settle_two_each_and_a_fifth_joins(cluster: Cluster) -> None:
    for i in range(4):
        cluster.start(f"r{i}")
    wait_until(lambda: cluster.balanced(4, 8), what="2/2/2/2")
    assert sorted(cluster.sizes().values()) == [2, 2, 2, 2]
    cluster.start("r4")
    wait_until(lambda: cluster.balanced(5, 8), what="sizes within one of each other")
    assert sorted(cluster.sizes().values()) == [1, 1, 2, 2, 2]


def test_a_killed_reader_is_replaced_within_the_session_and_nothing_is_lost(
    cluster: Cluster,
) -> None:
    for i in range(4):
        cluster.start(f"r{i}")
    wait_until(lambda: cluster.balanced(4, 8), what="balance")
    with Writer(cluster.url, cluster.scope) as writer:
        wait_until(lambda: len(cluster.events()) > 500, what="reading under way")
        victim = cluster.procs["r1"]
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        victim.wait(10)
        wait_until(
            lambda: cluster.balanced(3, 8) and "r1" not in cluster.sizes(),
            timeout=SESSION + 1.0,
            what="the killed reader's segments owned again within session timeout + 1 s",
        )
        reowned = time.monotonic() - killed
        after = len(writer.written)
        wait_until(lambda: len(writer.written) > after + 1000, what="writing after the failover")
    written = set(writer.written)
    wait_until(lambda: written <= {e["e"] for e in cluster.events()}, what="every event read")
    assert reowned <= SESSION + 1.0


def test_per_key_order_across_a_split_and_a_merge_while_readers_come_and_go(
    cluster: Cluster,
) -> None:
    for i in range(3):
        cluster.start(f"r{i}")
    wait_until(lambda: cluster.balanced(3, 8), what="balance")
    with Writer(cluster.url, cluster.scope) as writer, StreamManager.from_url(cluster.url) as sm:
        wait_until(lambda: len(writer.written) > 1000, what="writing")
        split = sm.scale_stream(cluster.scope, "s", [0], [(0.0, 0.0625), (0.0625, 0.125)])
        cluster.start("r3")
        wait_until(lambda: len(writer.written) > 3000, what="writing")
        sm.scale_stream(cluster.scope, "s", [split[1], 1], [(0.0625, 0.25)])
        cluster.procs["r0"].terminate()  # a graceful leave mid-run
        wait_until(lambda: len(writer.written) > 5000, what="writing")
    written = set(writer.written)
    wait_until(lambda: written <= {e["e"] for e in cluster.events()}, what="every event read")
    events = cluster.events()
    # within one ownership (reader, fencing token), each key's events come in write order
    runs: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for e in events:
        runs[(e["r"], e["t"], e["k"])].append(int(e["e"].split(":")[1]))
    for key, seqs in runs.items():
        assert seqs == sorted(seqs), f"out of order within one ownership: {key}"
    # across a scale, a key's successor events are read only after its predecessor's
    by_key_segment: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in events:
        by_key_segment[(e["k"], e["g"])].append(e["w"])
    with StreamManager.from_url(cluster.url) as manager:
        state = manager.stream_state(cluster.scope, "s")
    for (key, segment), times in by_key_segment.items():
        for successor in state.segments[segment].successors:
            later = by_key_segment.get((key, successor))
            if later:
                assert max(times) <= min(later), (
                    f"{key}: successor {successor} read before {segment} ended"
                )


def test_a_paused_reader_is_fenced_and_cannot_commit_after_it_resumes(cluster: Cluster) -> None:
    cluster.start("steady")
    cluster.start("paused")
    wait_until(lambda: cluster.balanced(2, 8), what="balance")
    paused = cluster.procs["paused"]
    paused.send_signal(signal.SIGSTOP)
    wait_until(
        lambda: cluster.balanced(1, 8) and "paused" not in cluster.sizes(),
        timeout=SESSION + 5,
        what="the paused reader removed and its segments taken over",
    )
    paused.send_signal(signal.SIGCONT)
    assert paused.wait(30) == 3
    report = json.loads((cluster.out / "paused.fenced").read_text())
    assert report["commit"] == "refused: ReaderNotInGroupError"
    assert "session" in report["reason"] or "removed" in report["reason"]
    assert cluster.sizes() == {"steady": 8}


@pytest.mark.long
def test_a_rolling_restart_under_the_same_ids_moves_no_segment(
    redis_url: str, scope: str, tmp_path: Path
) -> None:
    """Kafka's bounce test with static membership: every reader of the group, in turn, is
    SIGKILLed and restarted under its own id within a second while a writer writes. No segment
    is ever read by another reader id, nothing is lost, and only events after each killed
    reader's last commit come again (auto commits every 0.2 s)."""
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(8)))
    timing = {**TIMING, "session_timeout": 10.0, "heartbeat_interval": 1.0}
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **timing))
    cluster = Cluster(redis_url, scope, tmp_path)
    pauses: list[float] = []
    try:
        for i in range(4):
            cluster.start(f"r{i}")
        wait_until(lambda: cluster.balanced(4, 8), what="balance")
        owners = {
            tuple(s): r for r, segs in cluster.group.get_segment_distribution().assigned.items()
            for s in segs
        }  # fmt: skip
        with Writer(cluster.url, cluster.scope) as writer:
            wait_until(lambda: len(cluster.events()) > 500, what="reading under way")
            for i in range(4):
                name = f"r{i}"
                cluster.procs[name].send_signal(signal.SIGKILL)
                cluster.procs[name].wait(10)
                killed_at = time.time()
                cluster.start(name)  # a supervisor restarts it under its own id at once
                wait_until(
                    lambda name=name, at=killed_at: any(  # type: ignore[misc]
                        e["r"] == name and e["w"] > at for e in cluster.events()
                    ),
                    what=f"{name} reading again",
                )
                first = min(
                    e["w"] for e in cluster.events() if e["r"] == name and e["w"] > killed_at
                )
                pauses.append(first - killed_at)
                distribution = cluster.group.get_segment_distribution().assigned
                now = {tuple(s): r for r, segs in distribution.items() for s in segs}
                assert now == owners  # nobody else took any segment over
            after = len(writer.written)
            wait_until(lambda: len(writer.written) > after + 500, what="writing after")
        written = set(writer.written)
        wait_until(lambda: written <= {e["e"] for e in cluster.events()}, what="every event read")
        events = [e for e in cluster.events() if "e" in e]
        for e in events:
            assert owners[(e["s"], e["g"])] == e["r"], e  # each segment read by one reader id
        delivered = [e["e"] for e in events]
        duplicates = len(delivered) - len(set(delivered))
        print(f"bounce: pauses {[round(p, 2) for p in pauses]} s, {duplicates} duplicates "
              f"of {len(set(delivered))} events")  # fmt: skip
    finally:
        cluster.stop_all()
