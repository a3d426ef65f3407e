"""``readergroup group ...``: list, create, describe, reset, checkpoint, reader-offline, delete,
history (the state log as an audit trail) and watch (a live view)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import click
from rich.live import Live
from rich.table import Table

from readergroup.cli.common import Context, command, scoped
from readergroup.cli.output import table
from readergroup.group_config import ReaderGroupConfig, StartPosition
from readergroup.group_manager import ReaderGroup, ReaderGroupManager
from readergroup.group_state import STATE_TYPES, UPDATE_TYPES
from readergroup.names import group_sync_name
from readergroup.redis_io import RedisConnection, translate_errors
from readergroup.stream_cut import StreamCut
from statesync.codec import Codec, DecodeError, TypeRegistry


@click.group()
def group() -> None:
    """Reader groups: inspect, reset, checkpoint, administer."""


def _manager(ctx: Context, scope: str) -> ReaderGroupManager:
    return ReaderGroupManager.from_url(scope, ctx.url, ctx.config)


@group.command("list")
@click.argument("scope")
@command
def list_groups(ctx: Context, scope: str) -> None:
    """List the reader groups of SCOPE."""
    with _manager(ctx, scope) as rgm:
        names = rgm.list_reader_groups()
        rows = []
        for name in names:
            g = rgm.get_reader_group(name)
            metrics = g.get_metrics()
            rows.append(
                [name, len(g.get_online_readers()), len(metrics.segments), metrics.total.events]
            )
    ctx.out.emit(
        {"scope": scope, "groups": names},
        f"reader groups of {scope}",
        ["group", "readers", "segments", "lag events"],
        rows,
    )


@group.command("create")
@click.argument("name")
@click.option("--stream", "streams", multiple=True, required=True, help="scope/stream to read.")
@click.option(
    "--start", default="head", show_default=True, help="head, tail, a server ms, or a cut."
)
@command
def create(ctx: Context, name: str, streams: tuple[str, ...], start: str) -> None:
    """Create reader group SCOPE/GROUP."""
    scope, group_name = scoped(name)
    position: StartPosition = start
    if start.isdigit():
        position = int(start)
    elif start.startswith("rgcut"):
        position = StreamCut.from_text(start)
    with _manager(ctx, scope) as rgm:
        created = rgm.create_reader_group(
            group_name, ReaderGroupConfig(streams=list(streams), start=position)
        )
    ctx.out.emit(
        {"group": f"{scope}/{group_name}", "created": created},
        f"{'created' if created else 'exists already'}: {scope}/{group_name}",
    )


def describe_rows(g: ReaderGroup) -> tuple[dict[str, Any], list[list[Any]]]:
    metrics = g.get_metrics()
    now, beats = g.heartbeats.beat("", 0)
    state = g.sync.state
    rows = []
    for lag in metrics.segments:
        reader = lag.reader
        age = None
        if (
            reader is not None
            and reader in beats
            and beats[reader][0] == state.readers[reader].generation
        ):
            age = round((now - beats[reader][1]) / 1000, 1)
        owner = reader or (
            "(waiting)" if (lag.stream, lag.segment) in state.future else "(unassigned)"
        )
        rows.append(
            [
                owner,
                lag.stream,
                lag.segment,
                lag.position,
                lag.tail,
                lag.lag.events,
                lag.lag.ms,
                age,
            ]
        )
    data = {
        "group": f"{g.scope}/{g.name}",
        "generation": state.generation,
        "readers": sorted(state.readers),
        "total_lag": dataclasses.asdict(metrics.total),
        "segments": [
            {
                "reader": r[0],
                "stream": r[1],
                "segment": r[2],
                "position": r[3],
                "tail": r[4],
                "lag_events": r[5],
                "lag_ms": r[6],
                "heartbeat_age_s": r[7],
            }
            for r in rows
        ],
        "checkpoints": [c.name for c in state.checkpoints if c.completed_ms >= 0],
    }
    return data, rows


DESCRIBE_COLUMNS = [
    "reader",
    "stream",
    "segment",
    "position",
    "tail",
    "lag events",
    "lag ms",
    "heartbeat age s",
]


@group.command("describe")
@click.argument("name")
@command
def describe(ctx: Context, name: str) -> None:
    """Readers, segments, positions, tails, lag (events and ms), last heartbeats."""
    scope, group_name = scoped(name)
    with _manager(ctx, scope) as rgm:
        g = rgm.get_reader_group(group_name)
        data, rows = describe_rows(g)
    total = data["total_lag"]
    ctx.out.emit(
        data,
        f"{scope}/{group_name}  readers {len(data['readers'])}  lag {total['events']} "
        f"events / {total['ms']} ms",
        DESCRIBE_COLUMNS,
        rows,
    )


@group.command("reset")
@click.argument("name")
@click.option("--to-earliest", is_flag=True, help="The head of every stream.")
@click.option("--to-latest", is_flag=True, help="The tail of every stream.")
@click.option("--to-datetime", help="ISO date-time (server clock), e.g. 2026-11-21T06:00:00+00:00.")
@click.option("--to-checkpoint", help="A completed checkpoint's name.")
@click.option("--to-stream-cut", help="A stream cut's text form.")
@click.option("--shift-by", type=int, help="Move N events back per segment (negative: forward).")
@click.option("--execute", is_flag=True, help="Apply the plan (without it, only print it).")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for readers.")
@command
def reset(
    ctx: Context,
    name: str,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_checkpoint: str | None,
    to_stream_cut: str | None,
    shift_by: int | None,
    execute: bool,
    timeout: float,
) -> None:
    """Plan (and with --execute apply) a reset of SCOPE/GROUP, like Kafka's --reset-offsets."""
    scope, group_name = scoped(name)
    chosen = [
        x
        for x in (
            to_earliest or None,
            to_latest or None,
            to_datetime,
            to_checkpoint,
            to_stream_cut,
            shift_by,
        )
        if x is not None
    ]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one --to-... option or --shift-by")
    start: Any = None
    if to_earliest:
        start = "head"
    elif to_latest:
        start = "tail"
    elif to_datetime:
        start = int(dt.datetime.fromisoformat(to_datetime).timestamp() * 1000)
    elif to_checkpoint:
        start = to_checkpoint
    elif to_stream_cut:
        cut = StreamCut.from_text(to_stream_cut)
        start = {cut.scoped_stream: cut}
    with _manager(ctx, scope) as rgm:
        g = rgm.get_reader_group(group_name)
        current = g.refresh().positions()
        plan = g.plan_reset(start, shift_by=shift_by)
        rows = [[s, seg, current.get((s, seg)), new] for (s, seg), new in sorted(plan.items())]
        if execute:
            with ctx.out.console.status("resetting: waiting for every reader to acknowledge"):
                g.reset_reader_group(start, shift_by=shift_by, timeout=timeout)
    data = {
        "executed": execute,
        "plan": [{"stream": r[0], "segment": r[1], "current": r[2], "new": r[3]} for r in rows],
    }
    title = "reset applied" if execute else "reset plan (not applied: add --execute)"
    ctx.out.emit(data, title, ["stream", "segment", "current", "new"], rows)


@group.command("checkpoint")
@click.argument("name")
@click.argument("checkpoint")
@click.option("--timeout", default=30.0, show_default=True)
@click.option("--declare-offline", is_flag=True, help="Remove readers that do not acknowledge.")
@command
def checkpoint(
    ctx: Context, name: str, checkpoint: str, timeout: float, declare_offline: bool
) -> None:
    """Take checkpoint CHECKPOINT of SCOPE/GROUP; print its stream cuts."""
    scope, group_name = scoped(name)
    with _manager(ctx, scope) as rgm:
        result = rgm.get_reader_group(group_name).initiate_checkpoint(
            checkpoint, timeout, declare_offline=declare_offline
        )
    cuts = {s: str(c) for s, c in result.stream_cuts.items()}
    ctx.out.emit(
        {"checkpoint": checkpoint, "stream_cuts": cuts},
        f"checkpoint {checkpoint} complete",
        ["stream", "stream cut"],
        sorted(cuts.items()),
    )


@group.command("reader-offline")
@click.argument("name")
@click.argument("reader")
@command
def reader_offline(ctx: Context, name: str, reader: str) -> None:
    """Declare READER of SCOPE/GROUP offline; its segments return at committed positions."""
    scope, group_name = scoped(name)
    with _manager(ctx, scope) as rgm:
        removed = rgm.get_reader_group(group_name).reader_offline(reader)
    ctx.out.emit({"reader": reader, "removed": removed}, "removed" if removed else "was not online")


@group.command("delete")
@click.argument("name")
@command
def delete(ctx: Context, name: str) -> None:
    """Delete reader group SCOPE/GROUP."""
    scope, group_name = scoped(name)
    with _manager(ctx, scope) as rgm:
        deleted = rgm.delete_reader_group(group_name)
    ctx.out.emit({"deleted": deleted}, "deleted" if deleted else "did not exist")


def summarize(update: Any) -> str:
    fields = {f.name: getattr(update, f.name) for f in dataclasses.fields(update)}
    fields.pop("generation", None)
    text = ", ".join(f"{k}={v}" for k, v in fields.items())
    return f"{type(update).__name__}({text})"[:160]


@group.command("history")
@click.argument("name")
@click.option("--limit", default=50, show_default=True, help="Most recent entries to show.")
@command
def history(ctx: Context, name: str, limit: int) -> None:
    """The group's state log as an audit trail: who acquired, released, committed, and when."""
    scope, group_name = scoped(name)
    connection = RedisConnection.from_url(ctx.url, ctx.config)
    try:
        sync_name = group_sync_name(scope, group_name)
        backend = connection.log_backend
        with translate_errors("read group history"):
            head = backend.read(sync_name, 1 << 62, 1).head_revision
            page = backend.read(sync_name, max(-1, head - limit), limit)
        codec = Codec(TypeRegistry([*UPDATE_TYPES, *STATE_TYPES]))
        rows = []
        for raw in page.entries:
            when = dt.datetime.fromtimestamp(raw.server_time_ms / 1000, dt.UTC).isoformat(
                timespec="milliseconds"
            )
            try:
                entry = codec.decode_entry(raw.revision, raw.server_time_ms, raw.payload)
                who = entry.writer.split("/")[0]
                what = "; ".join(summarize(u) for u in entry.updates)
            except DecodeError as exc:
                who, what = "?", f"undecodable entry: {exc}"
            rows.append([raw.revision, when, who, what])
    finally:
        connection.close()
    ctx.out.emit(
        {"entries": [{"revision": r[0], "time": r[1], "by": r[2], "what": r[3]} for r in rows]},
        f"history of {scope}/{group_name} (revisions {rows[0][0] if rows else '-'}..{head})",
        ["revision", "time (UTC)", "by", "what"],
        rows,
    )


@group.command("watch")
@click.argument("name")
@click.option(
    "--iterations", type=int, help="Stop after this many redraws (default: until Ctrl-C)."
)
@click.option("--refresh", default=2.0, show_default=True, help="Longest seconds between redraws.")
@command
def watch(ctx: Context, name: str, iterations: int | None, refresh: float) -> None:
    """A live view of SCOPE/GROUP, redrawn whenever its state changes (and every --refresh s)."""
    scope, group_name = scoped(name)
    with _manager(ctx, scope) as rgm:
        g = rgm.get_reader_group(group_name)

        def render() -> Table:
            data, rows = describe_rows(g)
            total = data["total_lag"]
            return table(
                f"{scope}/{group_name}  readers {len(data['readers'])}  lag "
                f"{total['events']} events / {total['ms']} ms  (revision {g.sync.revision})",
                DESCRIBE_COLUMNS,
                rows,
            )

        drawn = 0
        with Live(render(), console=ctx.out.console, auto_refresh=False) as live:
            try:
                while iterations is None or drawn < iterations:
                    g.sync.wait_for_updates(refresh)  # blocks on the state log
                    live.update(render(), refresh=True)
                    drawn += 1
            except KeyboardInterrupt:
                pass
