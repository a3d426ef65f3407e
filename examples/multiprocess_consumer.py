"""Several consumer processes share one stream through a reader group.

Each process joins the group, handles its share of the segments with ``reader.run`` (segments
in parallel threads, each segment in order, committing after the handler), and exits on SIGTERM.
The parent writes events, lets the consumers work, stops them, and checks that every event was
handled at least once.

    python examples/multiprocess_consumer.py [--consumers 3] [--events 3000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.testing.embedded_redis import redis_server


def consume(url: str, name: str, out: str) -> None:
    """A consumer process: handle events until SIGTERM, appending each to ``out``."""
    with (
        EventStreamClientFactory.from_url("demo", url) as factory,
        factory.create_reader(name, "consumers", UTF8StringSerializer()) as reader,
        open(out, "a", encoding="utf-8") as log,
    ):

        def handle(event: Any) -> None:
            log.write(event.event + "\n")
            log.flush()

        stats = reader.run(handle, max_workers=4)  # SIGTERM stops it cleanly
        print(f"{name}: handled {stats.handled}, committed {stats.commits} times", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--events", type=int, default=3000)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    with redis_server() as server, StreamManager.from_url(server.url) as sm:
        url = server.url
        sm.create_scope("demo")
        sm.create_stream("demo", "jobs", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(6)))
        with ReaderGroupManager.from_url("demo", url) as rgm:
            config = ReaderGroupConfig(streams=["demo/jobs"], commit_mode="manual")
            rgm.create_reader_group("consumers", config)
        outs = [str(Path(f"/tmp/consumer-{i}-{time.time_ns()}.log")) for i in range(args.consumers)]
        procs = [
            ctx.Process(target=consume, args=(url, f"c{i}", outs[i])) for i in range(args.consumers)
        ]
        for proc in procs:
            proc.start()
        with (
            EventStreamClientFactory.from_url("demo", url) as factory,
            factory.create_event_writer("jobs", UTF8StringSerializer()) as writer,
        ):
            for i in range(args.events):
                writer.write_event(f"job-{i}", routing_key=f"user-{i % 50}")

        def per_process() -> list[list[str]]:
            """What each process logged, one job per line (a job may appear twice)."""
            return [[line.strip() for line in open(o)] if Path(o).exists() else [] for o in outs]

        def handled() -> set[str]:
            return {job for jobs in per_process() for job in jobs}

        deadline = time.monotonic() + 60
        while len(handled()) < args.events and time.monotonic() < deadline:
            time.sleep(0.1)
        for proc in procs:
            if proc.pid:
                proc.terminate()  # SIGTERM: the runner finishes, commits, returns
        for proc in procs:
            proc.join(20)
        logs = per_process()
        done = handled()
        for o in outs:
            Path(o).unlink(missing_ok=True)
    ok = done == {f"job-{i}" for i in range(args.events)}
    handling = [len(jobs) for jobs in logs if jobs]
    duplicates = sum(handling) - len(done)
    print(
        f"{len(done)} of {args.events} distinct jobs handled by {len(handling)} of "
        f"{args.consumers} processes (per process: {', '.join(map(str, handling)) or 'none'})"
    )
    print(
        f"{duplicates} duplicates (a job handled again after its segment moved before the "
        "commit: at-least-once)"
        if duplicates
        else "no duplicates"
    )
    print("VERIFIED: every job handled" if ok else "MISMATCH: jobs missing")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
