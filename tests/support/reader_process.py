"""A reader-group member in its own OS process, for the multi-process tests.

``python -m tests.support.reader_process URL SCOPE GROUP READER_ID OUT_DIR``

Appends every event it reads to ``OUT_DIR/<reader>.events`` (JSON lines, flushed per batch, the
batch committed only after it was written), and rewrites ``OUT_DIR/<reader>.owned`` with its
owned segments after every read. On SIGTERM it closes gracefully. When fenced it records, in
``OUT_DIR/<reader>.fenced``, what happened when it then tried to commit through the group state
with its stale membership (the server-side fence), and exits with status 3.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from readergroup import (
    EventStreamClientFactory,
    ReaderNotInGroupError,
    SegmentNotOwnedError,
    UTF8StringSerializer,
)
from readergroup.core.group_config import ReaderConfig


def main() -> int:
    url, scope, group, reader_id, out_dir = sys.argv[1:6]
    out = Path(out_dir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    factory = EventStreamClientFactory.from_url(scope, url)
    reader = factory.create_reader(
        reader_id, group, UTF8StringSerializer(), ReaderConfig(read_batch=200)
    )
    events = (out / f"{reader_id}.events").open("a", encoding="utf-8")
    owned_path = out / f"{reader_id}.owned"
    try:
        while not stop.is_set():
            try:
                batch = reader.read_batch(200, timeout=0.2)
            except ReaderNotInGroupError as exc:
                return fenced(reader, out, reader_id, str(exc))
            for event in batch:
                if event.is_checkpoint:
                    cp = {"r": reader_id, "cp": event.checkpoint_name, "w": time.time()}
                    events.write(json.dumps(cp) + "\n")
                    continue
                record = {
                    "r": reader_id,
                    "s": event.stream,
                    "g": event.segment,
                    "o": event.offset,
                    "k": event.routing_key,
                    "e": event.event,
                    "t": event.fencing_token,
                    "w": time.time(),
                }
                events.write(json.dumps(record) + "\n")
            events.flush()
            os.fsync(events.fileno())
            tmp = owned_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(sorted(map(list, reader.owned_segments()))))
            tmp.replace(owned_path)
    finally:
        events.close()
    reader.close()
    factory.close()
    return 0


def fenced(reader: object, out: Path, reader_id: str, reason: str) -> int:
    member = reader._member  # type: ignore[attr-defined]  # the test inspects the server-side fence
    state = member.refresh()
    attempt = "accepted"
    try:
        member.commit(dict.fromkeys(state.assigned, (1, 10**9)) or {("x/y", 0): (1, 1)})
    except (ReaderNotInGroupError, SegmentNotOwnedError) as exc:
        attempt = f"refused: {type(exc).__name__}"
    (out / f"{reader_id}.fenced").write_text(json.dumps({"reason": reason, "commit": attempt}))
    return 3


if __name__ == "__main__":
    sys.exit(main())
