"""The options of ``group reset``, Kafka's ``--reset-offsets`` vocabulary: one scenario
(``--to-earliest`` or ``--to-head``, ``--to-latest`` or ``--to-tail``, ``--to-datetime``,
``--by-duration``, ``--to-offset``, ``--to-checkpoint``, ``--to-stream-cut``, ``--shift-by`` or
``--from-file``), a selection (``--stream``, ``--segment``), ``--dry-run`` (the default) or
``--execute``, and ``--export``. The plan table's blank cells are explained under it
(:data:`BLANK_CELLS`)."""

from __future__ import annotations

import csv
import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from readergroup.admin.group_manager import ReaderGroup
from readergroup.core.group_config import StartPosition
from readergroup.core.group_state import SegKey
from readergroup.core.stream_cut import StreamCut

F = TypeVar("F", bound=Callable[..., Any])

SCENARIOS = (
    "to_earliest",
    "to_latest",
    "to_datetime",
    "by_duration",
    "to_offset",
    "to_checkpoint",
    "to_stream_cut",
    "shift_by",
    "from_file",
)
SAME_WORDS = {"to_earliest": "--to-head", "to_latest": "--to-tail"}
"""The other spelling of each start-word scenario: one set of words everywhere (earliest or
head, latest or tail), as ``group create --start`` and the Spark options take them."""
CSV_COLUMNS = ["stream", "segment", "current", "new"]
BLANK_CELLS = (
    "blank current: the group has no position there yet (a successor it reaches after its "
    "predecessors); blank new: the reset gives it none (a successor is read after its "
    "predecessors, an older segment is not read again)"
)
"""The legend printed under a reset plan that has blank cells."""
_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def reset_options(command: F) -> F:
    options = [
        click.option(
            "--to-earliest",
            "--to-head",
            "to_earliest",
            is_flag=True,
            help="The head (earliest event) of each.",
        ),
        click.option(
            "--to-latest",
            "--to-tail",
            "to_latest",
            is_flag=True,
            help="The tail (after the latest event).",
        ),
        click.option(
            "--to-datetime",
            help="ISO 8601 date-time, UTC unless it has an offset (2026-11-21T06:00:00).",
        ),
        click.option("--by-duration", help="ISO 8601 duration back from now: PnDTnHnMnS."),
        click.option("--to-offset", type=click.IntRange(min=0), help="Offset N in each segment."),
        click.option("--to-checkpoint", help="A completed checkpoint's name."),
        click.option(
            "--to-stream-cut", multiple=True, help="A stream cut's text (once per stream)."
        ),
        click.option("--shift-by", type=int, help="Move N events forward per segment (-N: back)."),
        click.option(
            "--from-file",
            type=click.Path(exists=True, dir_okay=False),
            help="Apply a plan CSV (stream,segment,current,new) written by --export.",
        ),
        click.option("--stream", "streams", multiple=True, help="Only this stream (repeatable)."),
        click.option(
            "--segment", "segments", type=int, multiple=True, help="Only this segment id."
        ),
        click.option(
            "--execute/--dry-run",
            default=False,
            help="Apply the plan, or only print it (the default).",
        ),
        click.option("--export", type=click.Path(dir_okay=False), help="Write the plan as CSV."),
        click.option(
            "--timeout", default=30.0, show_default=True, help="Seconds to wait for readers."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def parse_datetime(text: str) -> tuple[int, str]:
    """Server ms of an ISO 8601 date-time (naive: UTC) and the resolved UTC instant."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r} is not an ISO 8601 date-time; e.g. 2026-11-21T06:00:00 (read as UTC) "
            "or 2026-11-21T07:00:00+01:00",
            param_hint="--to-datetime",
        ) from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    utc = value.astimezone(dt.UTC)
    return int(utc.timestamp() * 1000), utc.isoformat(timespec="milliseconds")


def parse_duration(text: str) -> int:
    """Milliseconds of an ISO 8601 duration ``PnDTnHnMnS``."""
    match = _DURATION.match(text.strip().upper())
    if not match or text.strip().upper() in ("P", "PT"):
        raise click.BadParameter(
            f"{text!r} is not an ISO 8601 duration; e.g. PT30M, PT1H30M, P1DT2H",
            param_hint="--by-duration",
        )
    days, hours, minutes = (int(match.group(k) or 0) for k in "dhm")
    seconds = float(match.group("s") or 0)
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


def read_plan_file(path: str) -> dict[str, dict[int, int]]:
    """Per stream, the new position of each segment given in a plan CSV (blank: not read)."""
    plan: dict[str, dict[int, int]] = {}
    with Path(path).open(newline="") as file:
        reader = csv.DictReader(file)
        if reader.fieldnames is None or not {"stream", "segment", "new"} <= set(reader.fieldnames):
            raise click.BadParameter(
                f"{path}: the header must have columns {CSV_COLUMNS}", param_hint="--from-file"
            )
        for line, row in enumerate(reader, start=2):
            try:
                segments = plan.setdefault(row["stream"].strip(), {})
                if (row["new"] or "").strip():
                    segments[int(row["segment"])] = int(row["new"])
            except (ValueError, AttributeError) as exc:
                raise click.BadParameter(
                    f"{path} line {line}: segment and new must be integers: {row}",
                    param_hint="--from-file",
                ) from exc
    return plan


@dataclass
class ResetRequest:
    """One ``group reset`` invocation, validated."""

    scenario: str
    value: Any
    streams: list[str] | None
    segments: list[int] | None
    execute: bool
    export_path: str | None
    timeout: float
    resolved: str = ""
    """How a time was resolved (printed so the operator sees the instant used)."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ResetRequest:
        given = [
            name
            for name in SCENARIOS
            if options[name] not in (None, False, ())  # flags, values and multiples
        ]
        if len(given) != 1:
            flags = ", ".join(
                "--" + n.replace("_", "-") + (f" ({SAME_WORDS[n]})" if n in SAME_WORDS else "")
                for n in SCENARIOS
            )
            raise click.UsageError(f"give exactly one of {flags}")
        if given[0] == "from_file" and (options["streams"] or options["segments"]):
            raise click.UsageError("--from-file applies the file as it is: no --stream/--segment")
        return cls(
            given[0],
            options[given[0]],
            list(options["streams"]) or None,
            list(options["segments"]) or None,
            bool(options["execute"]),
            options["export"],
            float(options["timeout"]),
        )

    def plan(self, g: ReaderGroup) -> dict[SegKey, int]:
        """The positions this request resets ``g`` to (nothing is changed)."""
        streams, segments = self.streams, self.segments
        if self.scenario == "shift_by":
            return g.plan_reset(shift_by=int(self.value), streams=streams, segments=segments)
        if self.scenario == "to_offset":
            return g.plan_reset(to_offset=int(self.value), streams=streams, segments=segments)
        if self.scenario == "from_file":
            return self._from_file(g)
        start: StartPosition | dict[str, StartPosition]
        if self.scenario in ("to_earliest", "to_latest"):
            start = "head" if self.scenario == "to_earliest" else "tail"
        elif self.scenario == "to_datetime":
            start, text = parse_datetime(str(self.value))
            self.resolved = f"--to-datetime resolved to {text} UTC"
        elif self.scenario == "by_duration":
            start = g.server_time_ms() - parse_duration(str(self.value))
            instant = dt.datetime.fromtimestamp(start / 1000, dt.UTC)
            self.resolved = (
                f"--by-duration resolved to {instant.isoformat(timespec='milliseconds')} UTC"
            )
        elif self.scenario == "to_checkpoint":
            start = str(self.value)
        else:
            cuts = [StreamCut.from_text(text) for text in self.value]
            start = {cut.scoped_stream: cut for cut in cuts}
        return g.plan_reset(start, streams=streams, segments=segments)

    def _from_file(self, g: ReaderGroup) -> dict[SegKey, int]:
        current = g.refresh().positions()
        given = read_plan_file(str(self.value))
        plan = {key: p for key, p in current.items() if key[0] not in given}
        for stream, segments in given.items():
            plan.update({(stream, segment): p for segment, p in segments.items()})
        return plan

    def export(self, plan: Mapping[SegKey, int], current: Mapping[SegKey, int]) -> None:
        if self.export_path is None:
            return
        with Path(self.export_path).open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(CSV_COLUMNS)
            for stream, segment in sorted({*plan, *current}):
                writer.writerow(
                    [
                        stream,
                        segment,
                        current.get((stream, segment), ""),
                        plan.get((stream, segment), ""),
                    ]
                )
