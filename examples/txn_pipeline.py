"""Consume-transform-produce exactly once: worker processes read ``orders`` and write
``invoices`` in transactions that carry their reader group's positions (docs/transactions.md).

Three worker processes share the reader group ``invoicing``; each turns every order it reads
into an invoice and commits the invoices of a batch with the batch's positions, in one
transaction (``txn.commit(reader=reader)``). A supervisor restarts any worker that exits.

With ``--chaos`` the run is hostile: workers are SIGKILLed at random, some of them in the
middle of a commit (between two segments' appends), both streams are split while the workers
run, and Redis itself is restarted (its append-only file keeps what it acknowledged). At the
end ``invoices`` must hold exactly one invoice per order, in per-customer order: nothing lost,
nothing twice, nothing of an aborted transaction.

    python examples/txn_pipeline.py [--orders 3000] [--workers 3] [--chaos]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from readergroup import (
    EventStreamClientFactory,
    JsonSerializer,
    ReaderGroupConfig,
    ReaderGroupError,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    TransactionalWriterConfig,
    TransactionPositionsError,
)
from readergroup.testing.embedded_redis import local_redis_server, redis_server

TIMING = {"heartbeat_interval": 0.3, "session_timeout": 2.0, "group_refresh_time": 0.05}
CUSTOMERS = 25


# -- a worker (its own process) ------------------------------------------------------------
def die_mid_commit(entry: Any) -> None:
    """The chaos hook: one segment's share of a commit landed, the others not yet."""
    print(f"killed mid-commit after segment {entry.segment}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def work(url: str, scope: str, name: str, kill_mid_commit: float) -> int:
    """Read orders, write invoices with the positions; any error ends the process (the
    supervisor starts it again: it resumes where its committed transactions left off)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rng = random.Random()
    with EventStreamClientFactory.from_url(scope, url) as factory:
        invoices = factory.create_transactional_writer(
            "invoices",
            JsonSerializer(),
            TransactionalWriterConfig(transactional_id=f"invoicer-{name}", completion_grace=1.0),
        )
        if kill_mid_commit and rng.random() < kill_mid_commit:  # this life ends mid-commit
            invoices.completer.after_entry = die_mid_commit
        reader = factory.create_reader(name, "invoicing", JsonSerializer())
        invoices.bind_reader(reader)
        while not stop.is_set():
            batch = [e for e in reader.read_batch(50, timeout=0.2) if e.is_event]
            if not batch:
                continue
            txn = invoices.begin()
            for event in batch:
                order = event.event
                invoice = {"order": order["id"], "customer": order["customer"], "n": order["n"]}
                txn.write_event(invoice, routing_key=order["customer"])
            try:
                txn.commit(reader=reader)
            except TransactionPositionsError:
                continue  # a rebalance took a segment: the reader was rewound, read again
        reader.close()
    return 0


# -- the supervisor ------------------------------------------------------------------------
class Worker:
    """One worker slot: a process, started again whenever it exits (until stopped)."""

    def __init__(
        self, url: str, scope: str, name: str, kill_mid_commit: float, first: float
    ) -> None:
        self.args = [sys.executable, __file__, "--worker", name, "--url", url, "--scope", scope]
        self.kill_mid_commit, self.first = kill_mid_commit, first
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0  # SIGKILLs sent by the supervisor
        self.died = 0  # lives ended by SIGKILL: the supervisor's, or a kill mid-commit
        self.stopping = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.supervise, daemon=True)
        self.thread.start()

    def supervise(self) -> None:
        while not self.stopping:
            with self.lock:
                if self.stopping:
                    return
                chance = self.first if self.starts == 0 else self.kill_mid_commit
                args = [*self.args, "--kill-mid-commit", str(chance)]
                self.process = subprocess.Popen(args)
                self.starts += 1
            if self.process.wait() == -signal.SIGKILL:
                self.died += 1
            time.sleep(0.2)

    def kill(self) -> None:
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
                self.kills += 1

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.thread.join(30)


def split_all(sm: StreamManager, scope: str, stream: str) -> None:
    state = sm.stream_state(scope, stream)
    for segment in state.active_segments:
        middle = (segment.low + segment.high) / 2
        sm.scale_stream(
            scope,
            stream,
            [segment.segment_id],
            [(segment.low, middle), (middle, segment.high)],
        )


def invoices_of(url: str, scope: str) -> list[dict[str, Any]]:
    with EventStreamClientFactory.from_url(scope, url) as factory:
        client = factory.create_batch_client()
        return [json.loads(e.payload) for e in client.read_events("invoices")]


def run(url: str, orders: int, workers: int, chaos: bool, restart: Any) -> bool:
    scope = f"tp{uuid.uuid4().hex[:6]}"
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        for stream in ("orders", "invoices"):
            sm.create_stream(
                scope, stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))
            )
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group(
            "invoicing",
            ReaderGroupConfig(streams=[f"{scope}/orders"], commit_mode="manual", **TIMING),
        )
    # under chaos each worker's first life dies in the middle of its first commit, later lives
    # with a chance of 0.15
    pool = [
        Worker(url, scope, f"w{i}", 0.15 if chaos else 0.0, 1.0 if chaos else 0.0)
        for i in range(workers)
    ]
    rng = random.Random(7)
    written = 0
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer("orders", JsonSerializer())
        for step in range(10):
            for n in range(written, written + orders // 10):
                customer = f"c{n % CUSTOMERS}"
                order = {"id": n, "customer": customer, "n": n // CUSTOMERS}
                writer.write_event(order, routing_key=customer)
            written += orders // 10
            writer.flush()
            veterans = [worker for worker in pool if worker.starts > 1]  # first lives end
            if chaos and veterans:  # mid-commit; later ones are killed at random as well
                rng.choice(veterans).kill()
                if step == 3:
                    with StreamManager.from_url(url) as sm:
                        split_all(sm, scope, "orders")
                        split_all(sm, scope, "invoices")
                if step == 6 and restart is not None:
                    restart()
                    writer.flush()
            time.sleep(0.3)
        writer.close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if len(invoices_of(url, scope)) >= written:
                break
        except ReaderGroupError:
            pass  # Redis coming back
        time.sleep(0.3)
    time.sleep(1.0)  # anything still landing would show as a duplicate
    for worker in pool:
        worker.stop()
    invoices = invoices_of(url, scope)
    ids = [invoice["order"] for invoice in invoices]
    exact = sorted(ids) == list(range(written))
    in_order = True
    by_customer: dict[str, list[int]] = {}
    for invoice in invoices:
        by_customer.setdefault(invoice["customer"], []).append(invoice["n"])
    for numbers in by_customer.values():
        in_order = in_order and numbers == sorted(numbers)
    starts = sum(worker.starts for worker in pool)
    mid_commit = sum(worker.died - worker.kills for worker in pool)
    print(
        f"orders={written} invoices={len(invoices)} distinct={len(set(ids))} "
        f"worker_starts={starts} killed_mid_commit={mid_commit} exact={exact} "
        f"per_customer_order={in_order}"
    )
    return exact and in_order


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--chaos", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--scope", help=argparse.SUPPRESS)
    parser.add_argument("--kill-mid-commit", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        try:
            return work(args.url, args.scope, args.worker, args.kill_mid_commit)
        except (ReaderGroupError, OSError) as exc:
            print(f"worker {args.worker} exits: {exc!r}", file=sys.stderr)
            return 1  # the supervisor starts this worker again
    if args.chaos:  # a server of our own, restartable, keeping what it acknowledged
        with local_redis_server(persistent=True) as server:
            ok = run(server.url, args.orders, args.workers, True, server.restart)
    else:
        with redis_server() as server:
            ok = run(server.url, args.orders, args.workers, False, None)
    print("VERIFIED: one invoice per order, in order" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
