"""Rendering for the CLI: rich tables for people, JSON for scripts (``--json``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table


@dataclass
class Output:
    """Where a command's result goes."""

    as_json: bool
    console: Console

    def emit(
        self,
        data: Any,
        title: str = "",
        columns: Sequence[str] = (),
        rows: Sequence[Sequence[Any]] = (),
        legend: str = "",
    ) -> None:
        """Print ``data`` as JSON, or ``rows`` as a table under ``title`` with ``legend`` (what
        its blank cells mean, say) under it."""
        if self.as_json:
            self.console.print_json(json.dumps(data, default=str, sort_keys=True))
            return
        if columns:
            self.console.print(table(title, columns, rows, legend))
        elif title:
            self.console.print(title)


def console_for(as_json: bool) -> Console:
    """A console: on a terminal, its width; otherwise (piped, redirected, ``--json``) wide
    enough that no table, title or legend is ever cut or wrapped."""
    console = Console(soft_wrap=True)
    if as_json or not console.is_terminal:
        console = Console(soft_wrap=True, width=100_000)
    return console


def table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], legend: str = ""
) -> Table:
    """``rows`` under ``title``, ``None`` shown blank, ``legend`` under the table."""
    result = Table(
        title=title or None,
        caption=legend or None,
        caption_justify="left",
        show_lines=False,
        header_style="bold",
    )
    for column in columns:
        justify = "right" if column.lower() in NUMERIC else "left"
        result.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        result.add_row(*("" if v is None else str(v) for v in row))
    return result


NUMERIC = {
    "segment",
    "epoch",
    "head",
    "tail",
    "events",
    "bytes",
    "position",
    "lag",
    "lag ms",
    "lag events",
    "lag bytes",
    "revision",
    "heartbeat age s",
    "segments",
    "new",
    "current",
    "token",
    "offset",
}
