"""A tour of the ``readergroup`` CLI against the embedded Redis: create, write, describe,
scale, consume, inspect lag and history, plan and apply a reset, clean up.

    python examples/cli_tour.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from readergroup import EventStreamClientFactory, UTF8StringSerializer
from readergroup.testing.embedded_redis import redis_server

TOUR = [
    "scope list",
    "stream create shop/orders --segments 4",
    "stream write shop/orders --count 2000 --keys 40",
    "stream describe shop/orders",
    "stream scale shop/orders --split 0 --into 2",
    "group create shop/billing --stream shop/orders --start earliest",
    "CONSUME",
    "group list shop",
    "group describe shop/billing",
    "group describe shop/billing --state",
    "group history shop/billing --limit 8",
    "group reset shop/billing --shift-by -10",
    "group reset shop/billing --by-duration PT1H --stream shop/orders",
    "group reset shop/billing --to-earliest --execute",
    "--json group describe shop/billing",
    "group delete shop/billing",
    "stream delete shop/orders --seal",
]


def main() -> int:
    with redis_server() as server:
        env = {**os.environ, "REDIS_URL": server.url}
        for step in TOUR:
            if step == "CONSUME":
                print("\n$ (a reader of shop/billing consumes 500 events and commits)")
                with EventStreamClientFactory.from_url("shop", server.url) as factory:
                    reader = factory.create_reader("tour-reader", "billing", UTF8StringSerializer())
                    for _ in range(500):
                        reader.read_next_event(timeout=2)
                    reader.close()
                continue
            print(f"\n$ readergroup {step}", flush=True)
            done = subprocess.run(
                [sys.executable, "-m", "readergroup.cli", *step.split()], env=env, check=False
            )
            if done.returncode:
                return done.returncode
    print("\nVERIFIED: the tour ran every command")
    return 0


if __name__ == "__main__":
    sys.exit(main())
