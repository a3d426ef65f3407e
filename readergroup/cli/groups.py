"""``readergroup group ...``: list, create, describe, reset, checkpoint, reader-offline, delete,
history (the state log as an audit trail) and watch (a live view)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import random
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

import click
from rich.live import Live
from rich.table import Table
from rich.text import Text

from readergroup.admin.group_manager import ReaderGroup, ReaderGroupManager
from readergroup.admin.stream_manager import StreamManager
from readergroup.cli.common import CLI_WRITER, Context, command, scoped
from readergroup.cli.output import table
from readergroup.cli.reset_options import (
    BLANK_CELLS,
    CSV_COLUMNS,
    ResetRequest,
    reset_options,
)
from readergroup.core.errors import (
    ReaderGroupError,
    ReaderGroupInUseError,
    RedisUnavailableError,
)
from readergroup.core.group_config import ReaderGroupConfig, StartPosition, start_word
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES, GroupState, SegKey
from readergroup.core.group_view import group_state_word
from readergroup.core.names import group_sync_name
from readergroup.core.stream_cut import StreamCut
from readergroup.storage.connection import RedisConnection
from readergroup.storage.translate import translate_errors
from statesync.codec import Codec, TypeRegistry
from statesync.errors import DecodeError

logger = logging.getLogger(__name__)


@click.group()
def group() -> None:
    """Reader groups: inspect, reset, checkpoint, administer."""


def manager(ctx: Context, scope: str) -> ReaderGroupManager:
    return ReaderGroupManager.from_url(scope, ctx.url, ctx.config, writer_label=CLI_WRITER)


def group_summary(g: ReaderGroup) -> dict[str, Any]:
    """State word, online readers and lag totals of one group (``group list``, metrics)."""
    metrics = g.get_metrics()
    members = g.members()
    return {
        "scope": g.scope,
        "group": g.name,
        "state": g.status(),
        "readers": sum(not m.stale for m in members),
        "segments": len(metrics.segments),
        "lag_events": metrics.total.events,
        "lag_bytes": metrics.total.bytes,
        "lag_ms": metrics.total.ms,
    }


LIST_COLUMNS = [
    "group",
    "state",
    "readers",
    "segments",
    "lag events",
    "lag bytes",
    "lag ms",
    "error",
]


@group.command("list")
@click.argument("scope", required=False)
@click.option("--all-groups", is_flag=True, help="Every group of every scope.")
@command
def list_groups(ctx: Context, scope: str | None, all_groups: bool) -> None:
    """List the reader groups of SCOPE (or of every scope) with state and lag totals."""
    if (scope is None) == (not all_groups):
        raise click.UsageError("give a SCOPE or --all-groups")
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        if scope is not None:
            sm.list_streams(scope)  # ScopeNotFoundError, as `stream list` (a scope admin may)
            scopes = [scope]
        else:
            scopes = sm.list_scopes()  # every scope: the operator's list
    summaries = []
    for name in scopes:
        with manager(ctx, name) as rgm:
            for group_name in rgm.list_reader_groups():
                try:
                    summaries.append(group_summary(rgm.get_reader_group(group_name)))
                except ReaderGroupError as exc:  # one unreadable group does not hide the rest
                    logger.warning("group %s/%s cannot be read: %s", name, group_name, exc)
                    summaries.append(
                        {"scope": name, "group": group_name, "state": "unreadable"}
                        | {"error": f"{type(exc).__name__}: {exc}"}
                    )
    keys = ["state", "readers", "segments", "lag_events", "lag_bytes", "lag_ms"]
    ctx.out.emit(
        {"scope": scope, "groups": summaries},
        f"reader groups of {scope}" if scope else "reader groups of every scope",
        LIST_COLUMNS,
        [
            [f"{s['scope']}/{s['group']}", *(s.get(k) for k in keys), s.get("error")]
            for s in summaries
        ],
    )


def parse_start(text: str) -> StartPosition:
    """``head``/``earliest``, ``tail``/``latest``, a server time in ms, or a stream cut."""
    word = start_word(text.strip().lower())
    if word in ("head", "tail"):
        return str(word)
    if text.isdigit():
        return int(text)
    if text.startswith("rgcut"):
        return StreamCut.from_text(text)
    raise click.BadParameter(
        f"{text!r}: use earliest (or head), latest (or tail), a server time in ms, or a stream cut",
        param_hint="--start",
    )


@group.command("create")
@click.argument("name")
@click.option("--stream", "streams", multiple=True, required=True, help="scope/stream to read.")
@click.option(
    "--start",
    default="earliest",
    show_default=True,
    help="earliest (or head), latest (or tail), a server ms, or a stream cut.",
)
@command
def create(ctx: Context, name: str, streams: tuple[str, ...], start: str) -> None:
    """Create reader group SCOPE/GROUP."""
    scope, group_name = scoped(name)
    config = ReaderGroupConfig(streams=list(streams), start=parse_start(start))
    with manager(ctx, scope) as rgm:
        created = rgm.create_reader_group(group_name, config)
    ctx.out.emit(
        {"group": f"{scope}/{group_name}", "created": created},
        f"{'created' if created else 'exists already'}: {scope}/{group_name}",
    )


def owner_word(state: GroupState, segment: SegKey) -> str:
    """What ``describe`` shows for a segment no reader owns: waiting for a reader, read to its
    end, or waiting for its predecessors (a successor the group has yet to reach)."""
    if segment in state.unassigned:
        return "(unassigned)"
    return "(completed)" if segment in state.completed else "(waiting)"


def describe_rows(g: ReaderGroup) -> tuple[dict[str, Any], list[list[Any]]]:
    """The group as data (for ``--json``) and as rows of :data:`DESCRIBE_COLUMNS`. Readers whose
    heartbeat is older than the session timeout are marked ``(stale)``; streams that no longer
    exist are listed in ``missing_streams``."""
    metrics = g.get_metrics()
    members = {m.reader: m for m in g.members()}
    missing = g.missing_streams()
    state = g.sync.state
    rows = []
    for lag in metrics.segments:
        member = members.get(lag.reader) if lag.reader is not None else None
        age = None
        if member is not None and member.heartbeat_age_ms is not None:
            age = round(member.heartbeat_age_ms / 1000, 1)
        if lag.reader is None:
            owner = owner_word(state, (lag.stream, lag.segment))
        else:
            owner = lag.reader + (" (stale)" if member is None or member.stale else "")
        stream = lag.stream + (" (deleted)" if lag.stream in missing else "")
        rows.append(
            [owner, stream, lag.segment, lag.position, lag.tail, lag.lag.events, lag.lag.ms, age]
        )
    data = {
        "group": f"{g.scope}/{g.name}",
        "state": group_state_word(state, list(members.values()), missing),
        "generation": state.generation,
        "readers": sorted(state.readers),
        "stale_readers": sorted(r for r, m in members.items() if m.stale),
        "missing_streams": missing,
        "total_lag": dataclasses.asdict(metrics.total),
        "segments": [
            {
                "reader": lag.reader,
                "stream": lag.stream,
                "segment": lag.segment,
                "position": lag.position,
                "tail": lag.tail,
                "lag_events": lag.lag.events,
                "lag_ms": lag.lag.ms,
                "heartbeat_age_s": row[7],
            }
            for lag, row in zip(metrics.segments, rows, strict=True)
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
MEMBER_COLUMNS = [
    "reader",
    "host/pid",
    "segments",
    "heartbeat age s",
    "generation",
    "status",
    "log format",
]


def describe_title(data: dict[str, Any]) -> str:
    total = data["total_lag"]
    title = (
        f"{data['group']}  {data['state']}  readers {len(data['readers'])}  lag "
        f"{total['events']} events / {total['ms']} ms"
    )
    if data["stale_readers"]:
        title += f"  STALE readers {data['stale_readers']}"
    if data["missing_streams"]:
        title += f"  DELETED streams {data['missing_streams']}"
    return title


@group.command("describe")
@click.argument("name")
@click.option("--members", is_flag=True, help="One row per reader: host/pid, segments, age.")
@click.option("--state", "state_only", is_flag=True, help="Only the group's state word.")
@command
def describe(ctx: Context, name: str, members: bool, state_only: bool) -> None:
    """Readers, segments, positions, tails, lag (events and ms), last heartbeats.

    --state prints stable, rebalancing, empty or dead; --members lists the readers.
    """
    scope, group_name = scoped(name)
    with manager(ctx, scope) as rgm:
        g = rgm.get_reader_group(group_name)
        if state_only:
            word = g.status()
            ctx.out.emit({"group": f"{scope}/{group_name}", "state": word}, word)
            return
        if members:
            views = g.members()
            rows = [
                [
                    m.reader,
                    m.client or "",
                    len(m.segments),
                    None if m.heartbeat_age_ms is None else round(m.heartbeat_age_ms / 1000, 1),
                    m.generation,
                    "stale" if m.stale else "online",
                    m.log_format,
                ]
                for m in views
            ]
            data = {
                "group": f"{scope}/{group_name}",
                "members": [
                    {
                        "reader": m.reader,
                        "client": m.client,
                        "segments": [f"{s}:{n}" for s, n in m.segments],
                        "heartbeat_age_ms": m.heartbeat_age_ms,
                        "generation": m.generation,
                        "stale": m.stale,
                        "log_format": m.log_format,
                    }
                    for m in views
                ],
            }
            ctx.out.emit(data, f"members of {scope}/{group_name}", MEMBER_COLUMNS, rows)
            return
        data, rows = describe_rows(g)
    ctx.out.emit(data, describe_title(data), DESCRIBE_COLUMNS, rows)


@group.command("reset")
@click.argument("name")
@reset_options
@command
def reset(ctx: Context, name: str, **options: Any) -> None:
    """Plan (and with --execute apply) a reset of SCOPE/GROUP, like Kafka's --reset-offsets.

    Without --execute (or with --dry-run) only the plan is printed. --export writes the plan as
    CSV; edit it and apply it with --from-file FILE --execute. Streams and segments not selected
    (--stream, --segment) keep their committed positions. A cut or checkpoint of a stream the
    group does not read is refused and nothing changes.
    """
    scope, group_name = scoped(name)
    request = ResetRequest.from_options(options)
    with manager(ctx, scope) as rgm:
        g = rgm.get_reader_group(group_name)
        current = g.refresh().positions()
        plan = request.plan(g)
        request.export(plan, current)
        rows = [
            [s, seg, current.get((s, seg)), plan.get((s, seg))]
            for (s, seg) in sorted({*plan, *current})
        ]
        declared: tuple[str, ...] = ()
        if request.execute:
            with ctx.out.console.status("resetting: waiting for every reader to acknowledge"):
                declared = g.apply_reset(plan, timeout=request.timeout).declared_offline
    data = {
        "executed": request.execute,
        "resolved": request.resolved,
        "declared_offline": list(declared),
        "plan": [{"stream": r[0], "segment": r[1], "current": r[2], "new": r[3]} for r in rows],
    }
    title = "reset applied" if request.execute else "reset plan (not applied: add --execute)"
    if request.resolved:
        title += f"  ({request.resolved})"
    if declared:
        title += (
            f"; readers {list(declared)} did not acknowledge within {request.timeout}s and were "
            "declared offline (their segments restart at the new positions)"
        )
    blank = any(r[2] is None or r[3] is None for r in rows)
    ctx.out.emit(data, title, CSV_COLUMNS, rows, BLANK_CELLS if blank else "")


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
    with manager(ctx, scope) as rgm:
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
    with manager(ctx, scope) as rgm:
        removed = rgm.get_reader_group(group_name).reader_offline(reader)
    ctx.out.emit({"reader": reader, "removed": removed}, "removed" if removed else "was not online")


@group.command("compact")
@click.argument("name")
@command
def compact(ctx: Context, name: str) -> None:
    """Snapshot the log of SCOPE/GROUP at its head (stop its readers first to roll back to the
    previous version: readers joining read from the snapshot, which every version reads)."""
    scope, group_name = scoped(name)
    with manager(ctx, scope) as rgm:
        g = rgm.get_reader_group(group_name)
        revision = g.compact_log()
        online = [m.reader for m in g.members() if not m.stale]
    note = f"; readers still online write on: {', '.join(online)}" if online else ""
    ctx.out.emit(
        {"group": f"{scope}/{group_name}", "revision": revision, "online_readers": online},
        f"compacted {scope}/{group_name} at revision {revision}{note}",
    )


@group.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even with online readers (they then fail).")
@command
def delete(ctx: Context, name: str, force: bool) -> None:
    """Delete reader group SCOPE/GROUP (refused while readers are online, unless --force)."""
    scope, group_name = scoped(name)
    with manager(ctx, scope) as rgm:
        try:
            deleted = rgm.delete_reader_group(group_name, force=force)
        except ReaderGroupInUseError as exc:
            raise click.ClickException(
                f"ReaderGroupInUseError: {exc}: add --force to delete it anyway (those readers "
                "then fail with ReaderGroupNotFoundError)"
            ) from exc
    ctx.out.emit({"deleted": deleted}, "deleted" if deleted else "did not exist")


def summarize(update: Any) -> str:
    fields = {f.name: getattr(update, f.name) for f in dataclasses.fields(update)}
    fields.pop("generation", None)
    text = ", ".join(f"{k}={v}" for k, v in fields.items())
    return f"{type(update).__name__}({text})"[:160]


def writer_name(writer_id: str) -> str:
    """Who wrote an entry: a reader's id, ``cli@HOST`` for this CLI, ``console@HOST`` for the
    web console, or the bare id."""
    label = writer_id.split("/", maxsplit=1)[0]
    kind, _, host = label.partition(":")
    return f"{kind}@{host}" if kind in ("cli", "console") and host else label


@dataclasses.dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One entry of a group's state log: who wrote it, when (server clock), and what."""

    revision: int
    server_ms: int
    by: str
    what: str
    updates: tuple[Any, ...]
    """The decoded updates (empty when the entry could not be decoded)."""

    @property
    def time(self) -> str:
        when = dt.datetime.fromtimestamp(self.server_ms / 1000, dt.UTC)
        return when.isoformat(timespec="milliseconds")


def read_history(
    connection: RedisConnection, scope: str, group_name: str, limit: int
) -> tuple[list[HistoryEntry], int]:
    """The last ``limit`` entries of the group's state log (oldest first) and its head
    revision. An entry that cannot be decoded is shown as such, not skipped."""
    with translate_errors("history"):
        backend = connection.log_backend
        sync_name = group_sync_name(scope, group_name)
        head = backend.read(sync_name, 1 << 62, 1).head_revision
        page = backend.read(sync_name, max(-1, head - limit), limit)
        codec = Codec(TypeRegistry([*UPDATE_TYPES, *STATE_TYPES]))
        entries = []
        for raw in page.entries:
            try:
                entry = codec.decode_entry(raw.revision, raw.server_time_ms, raw.payload)
                who = writer_name(entry.writer)
                what = "; ".join(summarize(u) for u in entry.updates)
                updates = tuple(entry.updates)
            except DecodeError as exc:
                who, what, updates = "?", f"undecodable entry: {exc}", ()
            entries.append(HistoryEntry(raw.revision, raw.server_time_ms, who, what, updates))
    return entries, head


@group.command("history")
@click.argument("name")
@click.option("--limit", default=50, show_default=True, help="Most recent entries to show.")
@command
def history(ctx: Context, name: str, limit: int) -> None:
    """The group's state log as an audit trail: who acquired, released, committed, and when."""
    scope, group_name = scoped(name)
    with manager(ctx, scope) as rgm:
        rgm.get_reader_group(group_name)  # ReaderGroupNotFoundError for a missing group
    connection = RedisConnection.from_url(ctx.url, ctx.config)
    with closing(connection):
        entries, head = read_history(connection, scope, group_name, limit)
    rows = [[e.revision, e.time, e.by, e.what] for e in entries]
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
    """A live view of SCOPE/GROUP, redrawn whenever its state changes (and every --refresh s).

    While Redis is unreachable it shows "Redis unavailable, retrying" and carries on.
    """
    scope, group_name = scoped(name)
    with manager(ctx, scope) as rgm:
        g = rgm.get_reader_group(group_name)

        def render() -> Table:
            data, rows = describe_rows(g)
            return table(
                f"{describe_title(data)}  (revision {g.sync.revision})", DESCRIBE_COLUMNS, rows
            )

        watch_loop(ctx, render, g, iterations, refresh)


def watch_loop(
    ctx: Context,
    render: Callable[[], Table],
    g: ReaderGroup,
    iterations: int | None,
    refresh: float,
) -> None:
    """Redraw until ``iterations`` (or Ctrl-C): in place on a terminal, else one view after
    another (a log). While Redis is unreachable, say so and retry with backoff."""
    console = ctx.out.console
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    failures = 0

    def show(view: Table | Text) -> None:
        if live is not None:
            live.update(view, refresh=True)
        else:
            console.print(view)

    drawn = 0
    try:
        if live is not None:
            live.start()
        view: Table | Text = render()
        show(view)
        while iterations is None or drawn < iterations:
            try:
                with translate_errors("watch"):
                    g.sync.wait_for_updates(refresh)  # blocks on the state log
                view = render()
                failures = 0
            except RedisUnavailableError as exc:
                failures += 1
                view = Text(f"Redis unavailable, retrying ({exc})", style="yellow")
                logger.warning("watch of %s/%s: Redis unavailable: %s", g.scope, g.name, exc)
                backoff = min(refresh, 0.05 * 2 ** min(failures, 5))
                time.sleep(backoff * random.uniform(0.5, 1))  # noqa: S311 (jitter)
            show(view)
            drawn += 1
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
