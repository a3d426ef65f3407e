"""Stopping on SIGTERM/SIGINT: handlers that set a stop event, installed and restored as a pair.

Used by :func:`~readergroup.client.runner.run` and by
:meth:`~readergroup.client.reader.EventStreamReader.install_signal_handlers`. Python runs
signal handlers on the main thread only, so elsewhere nothing is installed (the caller stops
by its own event)."""

from __future__ import annotations

import signal
import threading
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install(stop: threading.Event) -> dict[int, Any]:
    """Have SIGINT and SIGTERM set ``stop``; returns the handlers they had (for
    :func:`restore`), empty off the main thread (where none can be installed)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}
    for number in STOP_SIGNALS:
        previous[number] = signal.signal(number, lambda *_: stop.set())
    return previous


def restore(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`install` replaced."""
    for number, handler in previous.items():
        signal.signal(number, handler)
