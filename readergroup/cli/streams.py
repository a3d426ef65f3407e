"""``readergroup stream ...``: create, list, describe, write, scale, autoscale, seal, truncate,
delete."""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Any

import click
from rich.progress import Progress

from readergroup.admin import autoscale as autoscale_module
from readergroup.admin.autoscale import AutoScaler, AutoScaleSchedule
from readergroup.admin.stream_manager import StreamInfo, StreamManager
from readergroup.cli.common import Context, command, scoped
from readergroup.cli.service import log_as_a_service, stop_on_signals
from readergroup.client.client_factory import EventStreamClientFactory
from readergroup.client.serializers import BytesSerializer
from readergroup.client.writer import WriteFuture
from readergroup.core.catalog import subscribers_of
from readergroup.core.errors import ReaderGroupError
from readergroup.core.routing import segment_name, uniform_ranges
from readergroup.core.stream_config import MAX_SEGMENTS, ScalingPolicy, StreamConfiguration
from readergroup.core.stream_cut import StreamCut


@click.group()
def stream() -> None:
    """Streams: create, inspect, scale, seal, truncate, delete."""


def info_dict(info: StreamInfo) -> dict[str, Any]:
    return {
        "scope": info.scope,
        "stream": info.stream,
        "epoch": info.epoch,
        "sealed": info.sealed,
        "head_cut": str(info.head_cut),
        "tail_cut": str(info.tail_cut),
        "total_segments": info.total_segments,
        "segments": [
            {
                "segment_id": s.segment_id,
                "name": s.name,
                "low": s.low,
                "high": s.high,
                "head": s.head,
                "tail": s.tail,
                "bytes": s.bytes,
                "sealed": s.sealed,
            }
            for s in info.active_segments
        ],
    }


@stream.command("create")
@click.argument("name")
@click.option("--segments", default=1, show_default=True, help="Segments to start with.")
@click.option("--max-event-size", default=1024 * 1024, show_default=True, help="Bytes.")
@command
def create(ctx: Context, name: str, segments: int, max_event_size: int) -> None:
    """Create SCOPE/STREAM (and its scope if missing)."""
    scope, stream_name = scoped(name)
    config = StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(segments), max_event_size=max_event_size
    )
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        sm.create_scope(scope)
        created = sm.create_stream(scope, stream_name, config)
    ctx.out.emit(
        {"stream": f"{scope}/{stream_name}", "created": created},
        f"{'created' if created else 'exists already'}: {scope}/{stream_name}",
    )


@stream.command("list")
@click.argument("scope")
@command
def list_streams(ctx: Context, scope: str) -> None:
    """List the streams of SCOPE."""
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        names = sm.list_streams(scope)
        rows = []
        for name in names:
            info = sm.get_stream_info(scope, name)
            rows.append([name, len(info.active_segments), info.epoch, info.events, info.sealed])
    ctx.out.emit(
        {"scope": scope, "streams": names},
        f"streams of {scope}",
        ["stream", "segments", "epoch", "events", "sealed"],
        rows,
    )


@stream.command("describe")
@click.argument("name")
@command
def describe(ctx: Context, name: str) -> None:
    """Segments, key ranges, epochs, sizes, head and tail of SCOPE/STREAM."""
    scope, stream_name = scoped(name)
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        info = sm.get_stream_info(scope, stream_name)
    rows = [
        [
            s.segment_id,
            s.name,
            f"[{s.low:.4f}, {s.high:.4f})",
            s.segment_id >> 32,
            s.head,
            s.tail,
            s.tail - s.head,
            s.bytes,
            "yes" if s.sealed else "",
        ]
        for s in info.active_segments
    ]
    ctx.out.emit(
        info_dict(info),
        f"{scope}/{stream_name}  epoch {info.epoch}  {'SEALED  ' if info.sealed else ''}"
        f"head {info.head_cut}  tail {info.tail_cut}",
        ["segment", "name", "key range", "epoch", "head", "tail", "events", "bytes", "sealed"],
        rows,
    )


@stream.command("write")
@click.argument("name")
@click.option("--count", type=int, help="Generate COUNT events instead of reading stdin lines.")
@click.option(
    "--key",
    "key_template",
    default="key-{n}",
    show_default=True,
    help="Routing key template ({n}: event number; {line}: the line).",
)
@click.option("--keys", default=100, show_default=True, help="Distinct keys for --count.")
@command
def write(ctx: Context, name: str, count: int | None, key_template: str, keys: int) -> None:
    """Bulk-write events to SCOPE/STREAM: stdin lines, or --count generated ones.

    Progress counts events Redis acknowledged, not events queued.
    """
    scope, stream_name = scoped(name)
    if count is None and sys.stdin.isatty():
        click.echo("reading events from stdin, one per line; end with Ctrl-D", err=True)
    lines = None if count is not None else [line.rstrip("\n") for line in sys.stdin]
    total = count if count is not None else len(lines or [])
    acked = AckCounter()
    with (
        EventStreamClientFactory.from_url(scope, ctx.url, ctx.config) as factory,
        factory.create_event_writer(stream_name, BytesSerializer()) as writer,
        Progress(console=ctx.out.console, disable=ctx.out.as_json) as progress,
    ):
        task = progress.add_task(f"writing {scope}/{stream_name} (acknowledged)", total=total)
        try:
            for n in range(total):
                line = lines[n] if lines is not None else f"event-{n}"
                key = key_template.format(n=n % keys if count is not None else n, line=line)
                writer.write_event(line.encode(), routing_key=key).add_done_callback(acked)
                if n % 1000 == 999:
                    progress.update(task, completed=acked.ok)
            writer.flush()
        except ReaderGroupError as exc:
            raise click.ClickException(
                f"{type(exc).__name__}: {exc}; {acked.ok} of {total} events were acknowledged"
                f"{acked.failed_text()}"
            ) from exc
        progress.update(task, completed=acked.ok)
    if acked.failed:
        raise click.ClickException(
            f"{acked.ok} of {total} events were acknowledged{acked.failed_text()}"
        )
    ctx.out.emit(
        {"stream": f"{scope}/{stream_name}", "written": acked.ok},
        f"wrote {acked.ok} events (acknowledged)",
    )


class AckCounter:
    """A write-future callback counting acknowledged and failed events (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.error: BaseException | None = None

    def __call__(self, future: WriteFuture) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.ok += 1
            else:
                self.failed += 1
                self.error = self.error or error

    def failed_text(self) -> str:
        if not self.failed:
            return ""
        return (
            f"; {self.failed} were not acknowledged (they may or may not be in the stream): "
            f"{type(self.error).__name__}: {self.error}"
        )


MAX_SPLIT = MAX_SEGMENTS
"""Most pieces one split may create: the cap on a stream's segments."""


@stream.command("scale")
@click.argument("name")
@click.option("--split", "split_segment", type=int, help="Segment id to split.")
@click.option("--into", default=2, show_default=True, help=f"Pieces for --split (2..{MAX_SPLIT}).")
@click.option(
    "--merge", "merge_segments", type=int, multiple=True, help="Segment ids to merge (neighbours)."
)
@command
def scale(
    ctx: Context, name: str, split_segment: int | None, into: int, merge_segments: tuple[int, ...]
) -> None:
    """Split one segment (--split S --into K) or merge neighbours (--merge A --merge B)."""
    scope, stream_name = scoped(name)
    if split_segment is not None and not 2 <= into <= MAX_SPLIT:
        raise click.BadParameter(
            f"{into}: a split makes 2..{MAX_SPLIT} segments (the segment cap); nothing was changed",
            param_hint="--into",
        )
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        state = sm.stream_state(scope, stream_name)
        active = sorted(r.segment_id for r in state.active_segments)
        if split_segment is not None and not merge_segments:
            record = state.segments.get(split_segment)
            if record is None or split_segment not in active:
                raise click.BadParameter(
                    f"{split_segment} is not an active segment of {scope}/{stream_name} (active: "
                    f"{active})",
                    param_hint="--split",
                )
            sealed, ranges = [split_segment], uniform_ranges(into, record.low, record.high)
        elif merge_segments and split_segment is None:
            records = sorted(
                (state.segments[s] for s in merge_segments if s in active),
                key=lambda r: r.low,
            )
            if len(records) != len(set(merge_segments)) or len(records) < 2:
                raise click.BadParameter(
                    f"--merge needs two or more active segments (active: {active})"
                )
            sealed, ranges = list(merge_segments), [(records[0].low, records[-1].high)]
        else:
            raise click.UsageError("give either --split or --merge")
        new = sm.scale_stream(scope, stream_name, sealed, ranges)
    ctx.out.emit(
        {"sealed": sealed, "created": new},
        f"sealed {sealed}; created {[segment_name(scope, stream_name, s) for s in new]}",
    )


@stream.command("autoscale")
@click.argument("name")
@click.option(
    "--target-rate",
    type=float,
    help="First set the stream's scaling policy: split segments busier than this many events/s, "
    "merge quiet neighbours (needed unless the stream already scales by event rate).",
)
@click.option("--scale-factor", default=2, show_default=True, help="With --target-rate.")
@click.option("--min-segments", default=1, show_default=True, help="With --target-rate.")
@click.option(
    "--interval", default=10.0, show_default=True, help="Seconds between rounds (the rate window)."
)
@click.option(
    "--max-backoff", default=60.0, show_default=True, help="Longest wait after a failed round."
)
@click.option(
    "--max-failures", default=30, show_default=True, help="Failed rounds in a row before giving up."
)
@command
def autoscale(
    ctx: Context,
    name: str,
    target_rate: float | None,
    scale_factor: int,
    min_segments: int,
    interval: float,
    max_backoff: float,
    max_failures: int,
) -> None:
    """Run the AutoScaler on SCOPE/STREAM until SIGTERM or Ctrl-C (then exit 0).

    Every --interval seconds it measures each active segment's event rate and splits the
    busiest one above the target or merges two quiet neighbours (below half of it), logging
    each decision at INFO on stderr; a failed round (Redis unreachable) is logged at WARNING
    and retried after a growing, capped backoff, at most --max-failures times in a row. It
    also ends when the stream is sealed. One per stream is enough; two are safe.
    """
    scope, stream_name = scoped(name)
    schedule = AutoScaleSchedule(
        interval=interval, max_backoff=max(max_backoff, interval), max_failures=max_failures
    )
    log_as_a_service(autoscale_module.__name__)
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        config = sm.stream_state(scope, stream_name).config
        if target_rate is not None:
            policy = ScalingPolicy.by_event_rate(target_rate, scale_factor, min_segments)
            sm.update_stream(scope, stream_name, dataclasses.replace(config, scaling_policy=policy))
        elif config.scaling_policy.kind != "by_event_rate":
            raise click.UsageError(
                f"{scope}/{stream_name} has a {config.scaling_policy.kind} scaling policy: give "
                "--target-rate EVENTS_PER_S to scale it by event rate"
            )
        if not ctx.out.as_json:
            ctx.out.emit(
                None,
                f"autoscaling {scope}/{stream_name}: a round every {interval} s; SIGTERM or "
                "Ctrl-C stops it",
            )
            ctx.out.console.file.flush()
        with stop_on_signals() as stop:
            done = AutoScaler(sm, scope, stream_name).run(stop, schedule)
    ctx.out.emit(
        dataclasses.asdict(done),
        f"autoscaler {done.summary}",
    )


@stream.command("seal")
@click.argument("name")
@command
def seal(ctx: Context, name: str) -> None:
    """Seal SCOPE/STREAM: no more writes."""
    scope, stream_name = scoped(name)
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        changed = sm.seal_stream(scope, stream_name)
    ctx.out.emit(
        {"sealed": True, "changed": changed}, "sealed" if changed else "was sealed already"
    )


@stream.command("truncate")
@click.argument("name")
@click.option("--to-stream-cut", "cut_text", help="Truncate before this stream cut.")
@click.option(
    "--to-tail", "--to-latest", "to_tail", is_flag=True, help="Truncate everything written so far."
)
@click.option("--before-time", type=int, help="Truncate events appended before this server ms.")
@command
def truncate(
    ctx: Context, name: str, cut_text: str | None, to_tail: bool, before_time: int | None
) -> None:
    """Delete events before a cut (and move the head there)."""
    scope, stream_name = scoped(name)
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        if (
            sum(x is not None and x is not False for x in (cut_text, to_tail or None, before_time))
            != 1
        ):
            raise click.UsageError(
                "give exactly one of --to-stream-cut, --to-tail (--to-latest), --before-time"
            )
        if cut_text:
            cut = StreamCut.from_text(cut_text)
        elif to_tail:
            cut = sm.tail_cut(scope, stream_name)
        else:
            assert before_time is not None
            cut = sm.cut_at_time(scope, stream_name, before_time)
        with Progress(console=ctx.out.console, disable=ctx.out.as_json) as progress:
            task = progress.add_task("truncating", total=1)
            sm.truncate_stream(scope, stream_name, cut)
            progress.update(task, completed=1)
    ctx.out.emit({"head_cut": str(cut)}, f"head is now {cut}")


@stream.command("delete")
@click.argument("name")
@click.option("--seal", "seal_first", is_flag=True, help="Seal it first if needed.")
@click.option("--force", is_flag=True, help="Delete even while reader groups read it.")
@command
def delete(ctx: Context, name: str, seal_first: bool, force: bool) -> None:
    """Delete a sealed SCOPE/STREAM and its data (refused while groups read it, unless
    --force)."""
    scope, stream_name = scoped(name)
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        readers = [f"{scope}/{g}" for g in subscribers_of(sm.catalog(scope), stream_name)]
        if readers and not force:
            raise click.ClickException(
                f"reader groups {readers} still read {scope}/{stream_name}; delete them first, or "
                "add --force to delete the stream anyway (those groups then report it missing)"
            )
        if seal_first:
            sm.seal_stream(scope, stream_name)
        deleted = sm.delete_stream(scope, stream_name)
    ctx.out.emit(
        {"deleted": deleted, "groups_reading": readers},
        ("deleted" if deleted else "did not exist")
        + (f" (reader groups {readers} read it)" if readers and deleted else ""),
    )
