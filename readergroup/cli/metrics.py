"""``readergroup metrics serve``: a Prometheus endpoint of every reader group's lag."""

from __future__ import annotations

import click
from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from readergroup.admin.metrics import register_metrics
from readergroup.cli.common import Context, command
from readergroup.cli.service import stop_on_signals
from readergroup.storage.connection import RedisConnection


@click.group()
def metrics() -> None:
    """Prometheus metrics: lag, positions, readers per group and segment."""


@metrics.command("serve")
@click.option("--port", default=9464, show_default=True, help="HTTP port (0: any free one).")
@click.option("--addr", default="0.0.0.0", show_default=True, help="Address to listen on.")  # noqa: S104
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeatable).")
@command
def serve(ctx: Context, port: int, addr: str, scopes: tuple[str, ...]) -> None:
    """Serve /metrics for Prometheus until Ctrl-C or SIGTERM: per group and segment the committed
    position, tail, lag in events, bytes and seconds; readers online and fenced, state,
    rebalances, checkpoints; scrape errors. Redis is read at each scrape."""
    connection = RedisConnection.from_url(ctx.url, ctx.config)
    registry = CollectorRegistry()
    register_metrics(registry, connection, scopes or None)
    server, thread = start_http_server(port, addr, registry=registry)
    where = f"http://{addr}:{server.server_port}/metrics"
    ctx.out.emit({"serving": where, "scopes": list(scopes) or "all"}, f"serving {where}")
    ctx.out.console.file.flush()
    try:
        with stop_on_signals() as stop:
            stop.wait()
    finally:
        server.shutdown()
        thread.join(5)
        connection.close()
