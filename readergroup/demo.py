"""``make demo``: the whole product in one run, against an embedded Redis it starts itself.

A writer process writes ``key:seq`` events on 24 keys; a reader group of worker processes
processes them (each worker logs what it processed). The group is shown live while a fourth
worker joins, one worker is SIGKILLed and the stream splits a segment. Then a Spark job reads the
same stream. The run ends with a verified summary: every event written was processed (at least
once; duplicates only after the kill), no key was processed out of order within an ownership, and
Spark counted exactly what was written. Everything is removed at the end.

    python -m readergroup.demo [--seconds 12] [--no-spark] [--console [--console-port 8080]]

``--console`` also serves the web console (``readergroup console``) on 127.0.0.1 for the
demo's Redis, so the group can be watched rebalancing in a browser.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.text import Text

from readergroup.admin.group_manager import ReaderGroupManager
from readergroup.admin.stream_manager import StreamManager
from readergroup.cli.groups import DESCRIBE_COLUMNS, describe_rows
from readergroup.cli.output import console_for, table
from readergroup.client.client_factory import EventStreamClientFactory
from readergroup.client.serializers import UTF8StringSerializer
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.stream_config import ScalingPolicy, StreamConfiguration
from readergroup.testing.embedded_redis import redis_server

KEYS = 24


def group_config(scope: str) -> ReaderGroupConfig:
    """Short timings, so the demo shows a failover within seconds."""
    return ReaderGroupConfig(
        streams=[f"{scope}/events"],
        heartbeat_interval=0.5,
        session_timeout=3.0,
        group_refresh_time=0.1,
        auto_commit_interval=0.2,
    )


def writer_process(url: str, scope: str, seconds: float, out: str) -> None:
    """Write ``k<key>:<seq>`` events at a steady pace for ``seconds``; record the count."""
    written = 0
    deadline = time.monotonic() + seconds
    with EventStreamClientFactory.from_url(scope, url) as factory:
        writer = factory.create_event_writer("events", UTF8StringSerializer())
        seq = 0
        while time.monotonic() < deadline:
            for key in range(KEYS):
                writer.write_event(f"k{key}:{seq}", routing_key=f"k{key}")
            written += KEYS
            seq += 1
            if seq % 10 == 0:
                writer.flush()
                time.sleep(0.02)
        writer.close()
    Path(out).write_text(json.dumps({"written": written, "per_key": seq}))


def worker_process(url: str, scope: str, reader_id: str, out_dir: str) -> None:
    """Process events as a member of the group; log each one (then commit-on-get)."""
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    log = (Path(out_dir) / f"{reader_id}.jsonl").open("a")
    with EventStreamClientFactory.from_url(scope, url) as factory:
        reader = factory.create_reader(reader_id, "workers", UTF8StringSerializer())
        while not stop["now"]:
            batch = reader.read_batch(200, timeout=0.2)
            for event in batch:
                log.write(json.dumps([reader_id, event.fencing_token, event.event]) + "\n")
            log.flush()
            os.fsync(log.fileno())
        reader.close()
    log.close()


@contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` for the block: processes started inside (Spark's
    JVM) keep writing their start-up WARN lines there instead of on the demo's screen."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def processed(out_dir: Path) -> list[tuple[str, int, str]]:
    rows: list[tuple[str, int, str]] = []
    for path in out_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                reader, token, event = json.loads(line)
                rows.append((reader, token, event))
    return rows


def main() -> int:  # noqa: PLR0915 - a script that tells one story, top to bottom
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="how long the writer writes")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark part")
    parser.add_argument("--console", action="store_true", help="serve the web console too")
    parser.add_argument("--console-port", type=int, default=8080, help="its port (0: any)")
    args = parser.parse_args()
    console = console_for(as_json=False)  # piped: wide enough that nothing is cut
    ctx = mp.get_context("spawn")
    scope = f"demo{uuid.uuid4().hex[:6]}"
    began = time.monotonic()
    with (
        redis_server() as server,
        tempfile.TemporaryDirectory() as work,
        contextlib.ExitStack() as extras,
    ):
        url, out = server.url, Path(work)
        console.print(f"[bold]Redis[/bold] {url} ({server.kind}); scope {scope}")
        web_console(url, args, console, extras, scope)
        sm = StreamManager.from_url(url)
        sm.create_scope(scope)
        sm.create_stream(
            scope, "events", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
        )
        with ReaderGroupManager.from_url(scope, url) as rgm:
            rgm.create_reader_group("workers", group_config(scope))
            group = rgm.get_reader_group("workers")
        writer = ctx.Process(
            target=writer_process, args=(url, scope, args.seconds, str(out / "writer.json"))
        )
        workers = {
            f"w{i}": ctx.Process(target=worker_process, args=(url, scope, f"w{i}", work))
            for i in range(3)
        }
        writer.start()
        for proc in workers.values():
            proc.start()
        events_log: list[str] = []
        plan: list[tuple[float, str, Callable[[], object]]] = [
            (0.30, "w3 joins", lambda: _start(workers, ctx, "w3", url, scope, work)),
            (0.55, "w1 is SIGKILLed", lambda: os.kill(workers["w1"].pid or 0, signal.SIGKILL)),
            (
                0.75,
                "segment 0 splits in two",
                lambda: sm.scale_stream(scope, "events", [0], [(0.0, 0.125), (0.125, 0.25)]),
            ),
        ]

        def view() -> Group:
            data, rows = describe_rows(group)
            total = data["total_lag"]
            header = (
                f"group {scope}/workers  readers {', '.join(data['readers']) or '-'}  "
                f"lag {total['events']} events / {total['ms']} ms  processed {len(processed(out))}"
            )
            return Group(
                Text(header, overflow="fold"),  # its own line: never squeezed into a border
                table("", DESCRIBE_COLUMNS, rows),
                Panel(
                    "\n".join(events_log[-6:]) or "starting",
                    title="what happens",
                    expand=console.is_terminal,  # piped: as wide as its text, not the console
                ),
            )

        with Live(view(), console=console, refresh_per_second=4) as live:
            while writer.is_alive():
                elapsed = (time.monotonic() - began) / max(args.seconds, 1)
                while plan and elapsed >= plan[0][0]:
                    _, what, action = plan.pop(0)
                    action()
                    events_log.append(f"{time.monotonic() - began:5.1f}s  {what}")
                group.sync.wait_for_updates(0.25)  # redraw as the group changes
                live.update(view())
            for _, what, action in plan:
                action()
                events_log.append(f"{time.monotonic() - began:5.1f}s  {what}")
            written = json.loads((out / "writer.json").read_text())
            events_log.append(
                f"{time.monotonic() - began:5.1f}s  writer done: {written['written']} events"
            )
            deadline = time.monotonic() + 60
            while (
                len({r[2] for r in processed(out)}) < written["written"]
                and time.monotonic() < deadline
            ):
                group.sync.wait_for_updates(0.25)
                live.update(view())
            events_log.append(f"{time.monotonic() - began:5.1f}s  every event processed")
            live.update(view())
        if not console.is_terminal:
            console.line()  # piped, the last view ends without a newline
        for proc in workers.values():
            if proc.is_alive():
                proc.terminate()
        for proc in workers.values():
            proc.join(15)

        rows = processed(out)
        unique = {r[2] for r in rows}
        duplicates = len(rows) - len(unique)
        order_violations = 0
        runs: dict[tuple[str, int, str], list[int]] = defaultdict(list)
        for reader, token, event in rows:
            key, seq = event.split(":")
            runs[(reader, token, key)].append(int(seq))
        for seqs in runs.values():
            order_violations += sum(1 for a, b in itertools.pairwise(seqs) if b <= a)
        expected = {f"k{k}:{s}" for k in range(KEYS) for s in range(written["per_key"])}
        spark_count = None
        if not args.no_spark:
            console.print("[bold]Spark[/bold]: reading the same stream with spark.read.format(...)")
            from readergroup.spark.session import local_session

            jvm_log = Path(work) / "spark.log"
            with stderr_to(jvm_log):  # the JVM keeps this stderr: its WARN lines go to the log
                spark = local_session(cores=2, app_name="readergroup-demo")
            df = (
                spark.read.format("readergroup")
                .option("redis_url", url)
                .option("scope", scope)
                .option("stream", "events")
                .load()
            )
            per_key = Counter(
                {r.routing_key: r["count"] for r in df.groupBy("routing_key").count().collect()}
            )
            spark_count = sum(per_key.values())
            spark.stop()
        info = sm.get_stream_info(scope, "events")
        ok = (
            unique == expected
            and order_violations == 0
            and (spark_count is None or spark_count == written["written"])
        )
        summary = table(
            "verified summary",
            ["check", "value"],
            [
                ["events written", written["written"]],
                ["events processed (distinct)", len(unique)],
                ["processed twice (after the kill, at-least-once)", duplicates],
                ["keys out of order within an ownership", order_violations],
                ["Spark count of the stream", "skipped" if spark_count is None else spark_count],
                ["stream epoch / total segments", f"{info.epoch} / {info.total_segments}"],
                ["seconds", f"{time.monotonic() - began:.1f}"],
            ],
        )
        console.print(summary)
        with ReaderGroupManager.from_url(scope, url) as rgm:
            rgm.delete_reader_group("workers")
        sm.seal_stream(scope, "events")
        sm.delete_stream(scope, "events")
        sm.delete_scope(scope)
        sm.close()
    console.print(
        "[bold green]VERIFIED[/bold green]: written = processed, no key out of order"
        + ("" if spark_count is None else ", Spark count exact")
        if ok
        else "[bold red]MISMATCH[/bold red]"
    )
    return 0 if ok else 1


def web_console(
    url: str, args: argparse.Namespace, out: Console, extras: contextlib.ExitStack, scope: str
) -> None:
    """With ``--console``: serve the web console for the demo's Redis until the demo ends
    (its port taken, any free one) and print its URL; otherwise say how to get it."""
    if not args.console:
        out.print("[bold]Web console[/bold]: make demo DEMO_ARGS=--console (or add --console)")
        return
    from readergroup.console.app import ConsoleSettings, create_app
    from readergroup.console.server import ConsoleServer
    from readergroup.storage.connection import RedisConnection

    connection = extras.enter_context(contextlib.closing(RedisConnection.from_url(url)))
    app = create_app(ConsoleSettings(redis_url=url), connection)
    try:
        server = ConsoleServer(app, "127.0.0.1", args.console_port)
    except OSError:  # the port is taken: any free one
        server = ConsoleServer(app, "127.0.0.1", 0)
    extras.enter_context(server)
    out.print(f"[bold]Web console[/bold]: {server.url}#/group/{scope}/workers")


def _start(workers: dict[str, Any], ctx: Any, name: str, url: str, scope: str, work: str) -> None:
    workers[name] = ctx.Process(target=worker_process, args=(url, scope, name, work))
    workers[name].start()


if __name__ == "__main__":
    sys.exit(main())
