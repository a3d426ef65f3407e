"""A rolling upgrade from the previous version, as teams deploy: the previous version's code (a
checkout of :data:`PREVIOUS_VERSION` from this repository's history) runs beside this one, each
reader in its own process, under a writer.

Needs the git history: the previous version is extracted with ``git archive`` from the
repository this file is in, so a shallow clone fails here (clone with full history, or
``git fetch --unshallow``). The extracted tree is put on ``PYTHONPATH`` ahead of the editable
install and run by the same interpreter.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupManager,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.core.config import ClientConfig
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES, CommitPositions
from readergroup.core.log_format import NEWEST_FORMAT
from readergroup.core.names import group_sync_name
from statesync.codec import Codec, TypeRegistry
from statesync.redis_backend import RedisLogBackend
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "support" / "upgrade_reader.py"

PREVIOUS_VERSION = "26dd67a30e0ec8a5096f3ac84dd5f96816abed81"
"""The version readers are upgraded from: 26dd67a, main when rolling upgrades were first
supported (later the previous release tag)."""

REBALANCE = 20.0
"""Deadline for one rebalance; the group's session timeout is 60 s, so a reader that left
without giving its segments back (closed without leaving) misses it."""

pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.fixture(scope="module")
def previous_version(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree of the previous version's files, extracted from this repository's history."""
    found = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "rev-parse",
            "--verify",
            "--quiet",
            f"{PREVIOUS_VERSION}^{{commit}}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(
            f"commit {PREVIOUS_VERSION} (the previous version) is not in {ROOT}'s history: the "
            "upgrade test needs a clone with full history (git fetch --unshallow)",
            pytrace=False,
        )
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", found.stdout.strip()],
        capture_output=True,
        check=True,
    ).stdout
    tree = tmp_path_factory.mktemp("previous-version")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    return tree


class Fleet:
    """Reader processes, each of the previous version or of this one."""

    def __init__(self, url: str, scope: str, out: Path, previous: Path) -> None:
        self.url, self.scope, self.out, self.previous = url, scope, out, previous
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def run(self, version: Path, reader_id: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), self.url, self.scope, "g", reader_id, str(self.out)],
            cwd=version,
            env={**os.environ, "PYTHONPATH": str(version)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def start(self, version: Path, reader_id: str) -> None:
        (self.out / f"{reader_id}.origin").unlink(missing_ok=True)
        self.procs[reader_id] = self.run(version, reader_id)
        wait_until(lambda: (self.out / f"{reader_id}.origin").exists() or self.exited(reader_id))
        assert not self.exited(reader_id), self.failure(reader_id)
        origin = (self.out / f"{reader_id}.origin").read_text()
        assert Path(origin) == version, f"{reader_id} ran the code in {origin}, not {version}"

    def exited(self, reader_id: str) -> bool:
        return self.procs[reader_id].poll() is not None

    def failure(self, reader_id: str) -> str:
        proc = self.procs[reader_id]
        _, err = proc.communicate(timeout=30)
        return f"reader {reader_id} exited {proc.returncode}:\n{err}"

    def stop(self, reader_id: str) -> str:
        """SIGTERM (a graceful close); the process must exit 0. Returns its stderr."""
        proc = self.procs.pop(reader_id)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"reader {reader_id} exited {proc.returncode}:\n{err}"
        return err

    def delivered(self, reader_id: str | None = None) -> list[str]:
        paths = self.out.glob(f"{reader_id or '*'}.events")
        return [line for path in paths for line in path.read_text().splitlines() if line]

    def wait_delivered(self, events: set[str]) -> None:
        """Wait until every one of ``events`` was delivered (at least once)."""
        wait_until(
            lambda: self.alive() and events <= set(self.delivered()),
            60,
            f"every one of {len(events)} acknowledged events delivered",
        )

    def alive(self) -> bool:
        for reader_id in list(self.procs):
            assert not self.exited(reader_id), self.failure(reader_id)
        return True

    def kill_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.communicate()


class Writer:
    """Writes events in a background thread until stopped; ``acknowledged``: flushed ones."""

    def __init__(self, url: str, scope: str, prefix: str = "") -> None:
        self.prefix = prefix
        self.factory = EventStreamClientFactory.from_url(scope, url)
        self.writer = self.factory.create_event_writer("s", UTF8StringSerializer())
        self.acknowledged: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            batch = [f"{self.prefix}k{key}:{seq}" for key in range(16)]
            for key, event in enumerate(batch):
                self.writer.write_event(event, routing_key=f"k{key}")
            self.writer.flush()
            self.acknowledged.extend(batch)
            seq += 1
            self.stop.wait(0.02)

    def close(self) -> None:
        self.stop.set()
        if self.thread.ident is not None:
            self.thread.join(30)
        self.writer.close()
        self.factory.close()


def log_entries(url: str, scope: str) -> list[tuple[int, int, str, list[Any]]]:
    """``(revision, frame version, writer id, updates)`` of every entry of the group's log."""
    codec = Codec(TypeRegistry([*UPDATE_TYPES, *STATE_TYPES]))
    backend = RedisLogBackend.from_url(url, key_prefix=ClientConfig().key_prefix)
    entries, after = [], 0  # every entry since the group's creation (kept: one compaction)
    try:
        while True:
            page = backend.read(group_sync_name(scope, "g"), after, 500)
            assert page.snapshot is None
            for raw in page.entries:
                version = msgpack.unpackb(raw.payload, raw=False, strict_map_key=False)["v"]
                decoded = codec.decode_entry(raw.revision, raw.server_time_ms, raw.payload)
                entries.append((raw.revision, version, decoded.writer, list(decoded.updates)))
                after = raw.revision
            if after >= page.head_revision or not page.entries:
                return entries
    finally:
        backend.close()


def wrote_after_commit(fleet: Fleet, writer: str, committer: str, since: int) -> bool:
    """Whether ``writer`` appended to the group's log after the first commit ``committer``
    wrote past revision ``since`` (so it read that commit: appends land at the log's head)."""
    entries = log_entries(fleet.url, fleet.scope)
    commits = [
        revision
        for revision, _, writer_id, updates in entries
        if revision > since and writer_id.startswith(f"{committer}/")
        for update in updates
        if isinstance(update, CommitPositions)
    ]
    return bool(commits) and any(
        revision > commits[0] and writer_id.startswith(f"{writer}/")
        for revision, _, writer_id, _ in entries
    )


@pytest.fixture
def fleet(redis_url: str, previous_version: Path, tmp_path: Path) -> Iterator[Fleet]:
    scope = f"up{uuid.uuid4().hex[:8]}"
    created = subprocess.run(
        [sys.executable, str(SCRIPT), redis_url, scope, "g", "admin"],
        cwd=previous_version,
        env={**os.environ, "PYTHONPATH": str(previous_version)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    fleet = Fleet(redis_url, scope, tmp_path, previous_version)
    try:
        yield fleet
    finally:
        fleet.kill_all()


def test_rolling_upgrade_of_two_readers_under_a_writer(fleet: Fleet) -> None:
    """Two readers of the previous version, replaced one at a time by readers of this one
    (the same ids, as a StatefulSet does) while a writer writes: every acknowledged event is
    delivered, every previous-version reader exits 0 having left the group on close (its
    segments move at once, not after its session), each replacement rebalances within one
    rebalance (one while this version splits a segment under the old reader), and the group
    writes entries the previous version applies until its last reader is gone, then the newest
    format. Then a rollback: with every reader stopped, a reader of
    the previous version joins (the last reader to leave compacted the log) and reads on."""
    old, new = fleet.previous, ROOT
    group = ReaderGroupManager.from_url(fleet.scope, fleet.url).get_reader_group("g")

    def balanced(readers: set[str], segments: int = 4) -> bool:
        dist = group.get_segment_distribution()
        sizes = {r: len(s) for r, s in dist.assigned.items()}
        return (
            fleet.alive()
            and set(sizes) == readers
            and sum(sizes.values()) == segments
            and max(sizes.values()) - min(sizes.values()) <= 1
        )

    def delivers(reader_id: str, more_than: int) -> bool:
        return fleet.alive() and len(fleet.delivered(reader_id)) > more_than

    left: dict[str, int] = {}
    segments = 4
    writer = Writer(fleet.url, fleet.scope)
    try:
        fleet.start(old, "r1")
        fleet.start(old, "r2")
        writer.thread.start()
        wait_until(lambda: balanced({"r1", "r2"}), REBALANCE, "two old readers balanced")
        wait_until(lambda: delivers("r1", 0) and delivers("r2", 0), what="old readers read")

        for reader_id, other in (("r1", "r2"), ("r2", "r1")):
            fleet.stop(reader_id)
            members = {m.reader for m in group.members()}
            assert reader_id not in members, f"old {reader_id} closed without leaving"
            group.sync.fetch_updates()
            left[reader_id] = group.sync.revision
            before = len(fleet.delivered())
            fleet.start(new, reader_id)
            wait_until(
                lambda r=reader_id, o=other, n=segments: balanced({r, o}, n),
                REBALANCE,
                "rebalanced",
            )
            # the other one applies the new one's commits (it writes past them) and reads on
            wait_until(
                lambda r=reader_id, o=other: (
                    fleet.alive() and wrote_after_commit(fleet, o, r, left[r])
                ),
                REBALANCE,
                f"{other} writing after the new {reader_id}'s first commit",
            )
            seen = len(fleet.delivered(other))
            wait_until(lambda o=other, n=seen: delivers(o, n), REBALANCE, f"{other} reads on")
            assert len(fleet.delivered()) > before
            if reader_id == "r1":  # this version splits a segment while the old r2 reads
                with StreamManager.from_url(fleet.url) as streams:
                    streams.scale_stream(fleet.scope, "s", [0], [(0.0, 0.125), (0.125, 0.25)])
                wait_until(lambda: balanced({"r1", "r2"}, 5), REBALANCE, "successors read")
                segments = 5
    finally:
        writer.close()
    acknowledged = set(writer.acknowledged)
    fleet.wait_delivered(acknowledged)
    for reader_id in ("r1", "r2"):
        fleet.stop(reader_id)
    lost = acknowledged - set(fleet.delivered())
    assert not lost, f"{len(lost)} acknowledged events never delivered"

    entries = log_entries(fleet.url, fleet.scope)
    # the old r2's leave: the last entry it wrote
    boundary = max(r for r, _, w, _ in entries if r <= left["r2"] and w.startswith("r2/"))
    mixed = [e for e in entries if e[0] <= boundary]
    newer = [(revision, writer_id) for revision, version, writer_id, _ in mixed if version > 2]
    assert not newer, f"entries an old reader cannot read while one was a member: {newer}"
    after = [version for revision, version, _, _ in entries if revision > boundary]
    assert after and after[-1] == NEWEST_FORMAT, f"formats after the upgrade: {set(after)}"

    fleet.start(old, "r1")
    rollback = Writer(fleet.url, fleet.scope, prefix="after-rollback-")
    try:
        rollback.thread.start()
        wait_until(lambda: balanced({"r1"}, 5), REBALANCE, "the rolled-back reader owns all")
        wait_until(lambda: delivers("r1", 0), REBALANCE, "the rolled-back reader reads")
    finally:
        rollback.close()
    fleet.wait_delivered(set(rollback.acknowledged))
    fleet.stop("r1")
