"""A reader of any version, for the rolling-upgrade test: run it by path with ``PYTHONPATH``
pointing at the version to run (an older checkout, or this one).

``python tests/support/upgrade_reader.py URL SCOPE GROUP READER_ID OUT_DIR``

Uses only the public API every supported version has. Writes ``OUT_DIR/<reader>.origin`` (the
directory its ``readergroup`` was imported from, so the test can check which version ran),
appends every event it reads to ``OUT_DIR/<reader>.events`` (one line per event, flushed
before the next read, which commits the batch), and on SIGTERM closes the reader (a graceful
leave) and exits 0. Any exception escapes: the process then exits 1 with its traceback on
stderr, which the test reports.

``admin`` instead of ``READER_ID``: create stream ``s`` (4 fixed segments) and group ``GROUP``
reading it with the version under test, then exit.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path

import readergroup
from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.core.group_config import ReaderConfig

SESSION_TIMEOUT = 60.0
"""Long, so a reader that does not leave on close() shows as a stall, not a quick expiry."""


def create(url: str, scope: str, group: str) -> None:
    with StreamManager.from_url(url) as streams:
        streams.create_scope(scope)
        streams.create_stream(
            scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))
        )
    config = ReaderGroupConfig(
        streams=[f"{scope}/s"],
        heartbeat_interval=0.3,
        session_timeout=SESSION_TIMEOUT,
        group_refresh_time=0.1,
        auto_commit_interval=0.2,
    )
    with ReaderGroupManager.from_url(scope, url) as groups:
        groups.create_reader_group(group, config)


def read(url: str, scope: str, group: str, reader_id: str, out: Path) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    origin = out / f"{reader_id}.origin"
    origin.with_suffix(".tmp").write_text(str(Path(readergroup.__file__).parent.parent))
    origin.with_suffix(".tmp").replace(origin)
    factory = EventStreamClientFactory.from_url(scope, url)
    reader = factory.create_reader(
        reader_id, group, UTF8StringSerializer(), ReaderConfig(read_batch=100)
    )
    with (out / f"{reader_id}.events").open("a", encoding="utf-8") as events:
        while not stop.is_set():
            for event in reader.read_batch(100, timeout=0.2):
                if not event.is_checkpoint:
                    events.write(f"{event.event}\n")
            events.flush()
    reader.close()
    factory.close()


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    url, scope, group, reader_id = sys.argv[1:5]
    if reader_id == "admin":
        create(url, scope, group)
    else:
        read(url, scope, group, reader_id, Path(sys.argv[5]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
