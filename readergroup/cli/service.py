"""Long-running CLI commands (``stream autoscale``, ``metrics serve``): a stop event that
SIGTERM and SIGINT (Ctrl-C) set, so the command finishes its round, logs its last state and
exits 0 instead of dying mid-write."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from readergroup.cli.common import LIBRARY_LOGGERS

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT while the block runs (the previous handlers are
    restored after it). Call from the main thread.

    The handler sets the event from a new thread: a handler runs in the main thread, which may
    hold the event's lock at that instant (inside ``wait``), and setting it there would
    deadlock."""
    stop = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        logger.info("%s received: stopping", signal.Signals(signum).name)
        threading.Thread(target=stop.set, name="stop-on-signal", daemon=True).start()

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def log_as_a_service(*chatty: str) -> None:
    """A long-running command's log on stderr: the library's warnings, and INFO from the
    ``chatty`` loggers (what the service decides), unless ``-v``/``-vv`` asked for more."""
    chatty = (*chatty, __name__)  # and the signal that stopped it
    levels = [(n, logging.WARNING) for n in LIBRARY_LOGGERS] + [(n, logging.INFO) for n in chatty]
    for name, level in levels:
        named = logging.getLogger(name)
        if named.getEffectiveLevel() > level:
            named.setLevel(level)
