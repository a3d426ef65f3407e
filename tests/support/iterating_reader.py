"""A reader process that iterates (``for event in reader``) with the shutdown recipe of
``EventStreamReader.install_signal_handlers``; one event per line to OUT.

``python -m tests.support.iterating_reader URL SCOPE GROUP READER_ID OUT``
"""

from __future__ import annotations

import sys
import time

from readergroup import EventStreamClientFactory, UTF8StringSerializer


def main() -> int:
    url, scope, group, reader_id, out = sys.argv[1:6]
    with (
        EventStreamClientFactory.from_url(scope, url) as factory,
        open(out, "a", encoding="utf-8") as sink,
        factory.create_reader(reader_id, group, UTF8StringSerializer()) as reader,
    ):
        reader.install_signal_handlers()
        for event in reader:
            sink.write(f"{event.event}\n")
            sink.flush()
            time.sleep(0.002)  # the application's work
    return 0


if __name__ == "__main__":
    sys.exit(main())
