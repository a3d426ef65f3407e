"""``readergroup scope ...``: list the scopes."""

from __future__ import annotations

import click

from readergroup.admin.stream_manager import StreamManager
from readergroup.cli.common import Context, command


@click.group()
def scope() -> None:
    """Scopes: the namespaces of streams and reader groups."""


@scope.command("list")
@command
def list_scopes(ctx: Context) -> None:
    """List every scope with its number of streams."""
    with StreamManager.from_url(ctx.url, ctx.config) as sm:
        rows = [[name, len(sm.list_streams(name))] for name in sm.list_scopes()]
    ctx.out.emit(
        {"scopes": [{"scope": r[0], "streams": r[1]} for r in rows]},
        "scopes",
        ["scope", "streams"],
        rows,
    )
