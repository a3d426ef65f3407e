"""``readergroup metrics serve``: a Prometheus endpoint (placeholder, filled below)."""

from __future__ import annotations

import click


@click.group()
def metrics() -> None:
    """Prometheus metrics: lag, positions, readers per group and segment."""
