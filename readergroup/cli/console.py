"""``readergroup console``: the web console (needs ``pip install 'readergroup[console]'``)."""

from __future__ import annotations

from contextlib import closing, suppress

import click

from readergroup.cli.common import Context, command
from readergroup.storage.connection import RedisConnection


@click.command("console")
@click.option("--port", default=8080, show_default=True, help="HTTP port (0: any free one).")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; anything but loopback needs --token.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Offer checkpoint, reset and remove-dead-reader (otherwise read-only).",
)
@click.option(
    "--token",
    envvar="READERGROUP_CONSOLE_TOKEN",
    help="Require this bearer token (header, or the login page's cookie); env "
    "READERGROUP_CONSOLE_TOKEN.",
)
@click.option(
    "--tick",
    default=1.0,
    show_default=True,
    help="Seconds a view read from Redis is shared by all viewers (pushes: at most 1/s).",
)
@click.option(
    "--sample-interval",
    default=5.0,
    show_default=True,
    help="Seconds between background samples of every group's lag (the 15-minute charts).",
)
@command
def console(
    ctx: Context,
    port: int,
    host: str,
    allow_actions: bool,
    token: str | None,
    tick: float,
    sample_interval: float,
) -> None:
    """Serve the web console until Ctrl-C: streams, scaling history, reader groups, lag.

    Binds 127.0.0.1 unless --host says otherwise, and refuses any other address without
    --token. Read-only unless --allow-actions; never shows a password.
    """
    try:
        from readergroup.console.app import ConsoleSettings, create_app
        from readergroup.console.auth import is_loopback, redact_url
        from readergroup.console.server import ConsoleServer
    except ImportError as exc:
        raise click.ClickException(
            f"the console needs its extra: pip install 'readergroup[console]' ({exc})"
        ) from exc
    if not is_loopback(host) and not token:
        raise click.UsageError(
            f"--host {host} is reachable from other machines: give --token (or "
            "READERGROUP_CONSOLE_TOKEN) so only people with it can use the console"
        )
    settings = ConsoleSettings(
        redis_url=ctx.url,
        allow_actions=allow_actions,
        token=token,
        tick=tick,
        sample_interval=sample_interval,
    )
    connection = RedisConnection.from_url(ctx.url, ctx.config)
    with closing(connection):
        server = ConsoleServer(create_app(settings, connection), host, port)
        mode = "actions allowed" if allow_actions else "read-only"

        def ready(url: str) -> None:
            ctx.out.emit(
                {"url": url, "redis": redact_url(ctx.url), "actions": allow_actions},
                f"readergroup console: {url}  ({mode}; Redis {redact_url(ctx.url)}; Ctrl-C stops)",
            )
            ctx.out.console.file.flush()

        with suppress(KeyboardInterrupt):  # Ctrl-C stops it (uvicorn re-raises it once done)
            server.serve(ready)
