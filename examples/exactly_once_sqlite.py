"""Exactly-once into your own database (SQLite): the consumer recipe.

Every worker applies events to its database and, **in the same database transaction**,
stores for each segment the offset to read next and the fencing token it read under. The
database is the source of truth for positions; the group's commits are only a hint:

1. ``on_segments_acquired`` (called before any event of those segments is handed out): seek
   each segment to the offset the database holds for it.
2. Apply a batch in one transaction: skip events below the stored offset; apply the rest;
   move the stored offset on, but only where the stored token is not newer than the
   event's (a newer one means another owner took the segment over: this worker's batch is
   stale and is rolled back).
3. Commit the group's positions after the database commit (so a new owner without the
   database would start close by; with it, the seek decides).

A worker killed at any point and restarted under its own id (static membership: it gets its
segments back at once) applies every event exactly once.

    python examples/exactly_once_sqlite.py [--events 3000]          # writer, 3 workers, a kill
    python examples/exactly_once_sqlite.py worker URL SCOPE GROUP ID DB   # one worker
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from readergroup import (
    EventRead,
    EventStreamClientFactory,
    EventStreamReader,
    JsonSerializer,
    ReaderGroupConfig,
    ReaderGroupManager,
    ReaderReplacedError,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.core.group_state import SegKey
from readergroup.testing.embedded_redis import redis_server

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT, amount INTEGER,
                                   times INTEGER NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS positions (stream TEXT, segment INTEGER, next INTEGER, token INTEGER,
                                      PRIMARY KEY (stream, segment));
"""


def connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    return db


class ResumeFromDatabase:
    """Rebalance listener: seek acquired segments to the offsets the database holds."""

    def __init__(self, db: sqlite3.Connection, reader: EventStreamReader[dict[str, int]]):
        self.db, self.reader = db, reader

    def on_segments_acquired(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        for stream, segment in segments:
            row = self.db.execute(
                "SELECT next FROM positions WHERE stream = ? AND segment = ?", (stream, segment)
            ).fetchone()
            if row is not None:
                self.reader.seek((stream, segment), row[0])

    def on_segments_released(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        return None  # every batch handed out was applied before the next read call


def apply(db: sqlite3.Connection, events: list[EventRead[dict[str, int]]]) -> int:
    """Apply ``events`` and move their segments' stored offsets in one transaction; returns
    how many were applied (stale or already applied events are skipped)."""
    applied = 0
    db.execute("BEGIN IMMEDIATE")
    try:
        stored: dict[SegKey, tuple[int, int]] = {}
        for event in events:
            key = (event.stream or "", event.segment or 0)
            if key not in stored:
                row = db.execute(
                    "SELECT next, token FROM positions WHERE stream = ? AND segment = ?", key
                ).fetchone()
                stored[key] = (row[0], row[1]) if row else (0, -1)
            next_offset, token = stored[key]
            offset, fencing = event.offset or 0, event.fencing_token or 0
            if token > fencing or offset < next_offset:
                continue  # a newer owner wrote this segment, or this event is applied already
            order = event.event
            assert order is not None
            db.execute(
                "INSERT INTO orders (id, customer, amount) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET times = times + 1",
                (order["id"], str(order["customer"]), order["amount"]),
            )
            stored[key] = (offset + 1, fencing)
            applied += 1
        db.executemany(
            "INSERT INTO positions (stream, segment, next, token) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (stream, segment) DO UPDATE SET next = excluded.next, "
            "token = excluded.token WHERE excluded.token >= positions.token",
            [(s, g, n, t) for (s, g), (n, t) in stored.items()],
        )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return applied


def worker(url: str, scope: str, group: str, reader_id: str, path: str) -> int:
    db = connect(path)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    with EventStreamClientFactory.from_url(scope, url) as factory:
        reader = factory.create_reader(reader_id, group, JsonSerializer())
        reader.add_rebalance_listener(ResumeFromDatabase(db, reader))
        try:
            while not stop["now"]:
                events = [e for e in reader.read_batch(200, timeout=0.2) if e.is_event]
                if events:
                    apply(db, events)
                    reader.commit()
        except ReaderReplacedError:
            return 0  # a newer incarnation of this id runs
        finally:
            reader.close()
    return 0


def spawn(url: str, scope: str, reader_id: str, path: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, __file__, "worker", url, scope, "orders", reader_id, path]
    return subprocess.Popen(args)


def demo(url: str, events: int, workdir: str) -> int:
    scope = f"eo{os.getpid()}"
    with StreamManager.from_url(url) as manager:
        manager.create_scope(scope)
        manager.create_stream(
            scope, "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(6))
        )
    with ReaderGroupManager.from_url(scope, url) as groups:
        groups.create_reader_group(
            "orders",
            ReaderGroupConfig(
                streams=[f"{scope}/orders"],
                commit_mode="manual",
                heartbeat_interval=0.5,
                session_timeout=10.0,
                group_refresh_time=0.1,
            ),
        )
    path = str(Path(workdir) / "orders.db")
    connect(path).close()
    workers = {f"w{i}": spawn(url, scope, f"w{i}", path) for i in range(3)}
    with (
        EventStreamClientFactory.from_url(scope, url) as factory,
        factory.create_event_writer("orders", JsonSerializer()) as writer,
    ):
        for i in range(events):
            order = {"id": i, "customer": i % 40, "amount": i % 7 + 1}
            writer.write_event(order, routing_key=f"c{i % 40}")
            if i == events // 2:
                writer.flush()
                time.sleep(1.0)  # the workers are busy: kill one mid-stream
                workers["w1"].send_signal(signal.SIGKILL)
                workers["w1"].wait()
                time.sleep(0.5)  # a supervisor restarts it under its own id
                workers["w1"] = spawn(url, scope, "w1", path)
    db = connect(path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        (count,) = db.execute("SELECT COUNT(*) FROM orders").fetchone()
        if count >= events:
            break
        time.sleep(0.2)
    for process in workers.values():
        process.send_signal(signal.SIGTERM)
    for process in workers.values():
        process.wait(30)
    count, twice, total = db.execute(
        "SELECT COUNT(*), COALESCE(SUM(times > 1), 0), COALESCE(SUM(amount), 0) FROM orders"
    ).fetchone()
    expected_total = sum(i % 7 + 1 for i in range(events))
    print(f"applied {count} of {events} orders, {twice} more than once, total {total}")
    ok = count == events and twice == 0 and total == expected_total
    print("EXACTLY ONCE" if ok else "MISMATCH")
    return 0 if ok else 1


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        return worker(*sys.argv[2:7])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        if args.redis_url:
            return demo(args.redis_url, args.events, workdir)
        with redis_server() as server:
            return demo(server.url, args.events, workdir)


if __name__ == "__main__":
    sys.exit(main())
