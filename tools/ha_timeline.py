"""Where a Sentinel failover's time goes: a timeline of one failover under a writer and a reader
group (:class:`tools.ha_run.HaRun`), from the servers', the Sentinels' and the clients' sides.

    python -m tools.ha_timeline [--acks replicas=1] [--replicas 1] [--sync-delay 0] [--lossy]

A primary, ``--replicas`` replicas and 3 Sentinels are started; after a warm-up, a graceful
``SENTINEL FAILOVER`` (or, with ``--lossy``, a SIGKILL of the primary, restarted at once as a
replica of the promoted one). Recorded, in seconds from the start of the failover: every event
a Sentinel publishes (``+switch-master``, ``+role-change``, ...), every change of a
server's role, replica count or replication link (``INFO replication``, polled every 50 ms),
and the clients' warnings (a pool following a new primary, a writer retrying after a ``WAIT``
shortfall, readers adopting a regressed group log). Prints JSON: ``events`` ([seconds, source,
text]), ``comeback_seconds`` (every reader delivered an event written after the failover) and
the run's figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from typing import Any

import redis

from readergroup import ClientConfig
from readergroup.testing.embedded_redis import LocalSentinelGroup, local_sentinel_group
from tools.ha_run import HaRun

LIBRARY_LOGGERS = ("readergroup", "statesync")


class Timeline:
    """Events with their time, from several threads."""

    def __init__(self) -> None:
        self.zero = time.monotonic()
        self.events: list[tuple[float, str, str]] = []
        self._lock = threading.Lock()

    def add(self, source: str, text: str) -> None:
        with self._lock:
            self.events.append((round(time.monotonic() - self.zero, 3), source, text))

    def restart_clock(self) -> None:
        """Times count from now on (earlier events get negative times)."""
        now = time.monotonic()
        with self._lock:
            shift = now - self.zero
            self.events = [(round(t - shift, 3), s, x) for t, s, x in self.events]
            self.zero = now


class _ClientLog(logging.Handler):
    def __init__(self, timeline: Timeline) -> None:
        super().__init__(logging.WARNING)
        self.timeline = timeline

    def emit(self, record: logging.LogRecord) -> None:
        self.timeline.add(f"client {record.threadName}", record.getMessage()[:200])


def _watch_sentinel(port: int, timeline: Timeline, stop: threading.Event) -> None:
    pubsub = redis.Redis(port=port, decode_responses=True).pubsub()
    pubsub.psubscribe("*")
    while not stop.is_set():
        message = pubsub.get_message(timeout=0.2)
        if message and message["type"] == "pmessage" and message["channel"] != "__sentinel__:hello":
            timeline.add(f"sentinel {port}", f"{message['channel']} {message['data']}")
    pubsub.close()


def _watch_roles(group: LocalSentinelGroup, timeline: Timeline, stop: threading.Event) -> None:
    seen: dict[int, Any] = {}
    while not stop.is_set():
        for server in [group.primary, *group.replicas]:
            try:
                with redis.Redis(port=server.port, socket_timeout=0.5) as client:
                    info = client.info("replication")
                state: Any = (
                    info["role"],
                    info.get("connected_slaves"),
                    info.get("master_link_status"),
                )
            except redis.RedisError as exc:
                state = type(exc).__name__
            if seen.get(server.port) != state:
                seen[server.port] = state
                timeline.add(f"server {server.port}", str(state))
        stop.wait(0.05)


def run(acks: str, *, replicas: int, sync_delay: int, lossy: bool) -> dict[str, Any]:
    timeline = Timeline()
    handler = _ClientLog(timeline)
    for name in LIBRARY_LOGGERS:  # the warnings go to the timeline only
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    stop = threading.Event()
    try:
        with local_sentinel_group(replicas=replicas, sentinels=3, sync_delay=sync_delay) as group:
            watchers = [  # each Sentinel publishes what it does itself
                threading.Thread(target=_watch_sentinel, args=(port, timeline, stop), daemon=True)
                for port in group.sentinel_ports
            ]
            watchers.append(
                threading.Thread(target=_watch_roles, args=(group, timeline, stop), daemon=True)
            )
            for watcher in watchers:
                watcher.start()
            client = ClientConfig(acks=acks, ack_timeout=1.0)
            ha = HaRun(group.url, readers=3, segments=4, client=client, pause=0.05)
            ha.start()
            time.sleep(2)  # a steady state before the failover
            timeline.restart_clock()
            timeline.add("run", "failover begins")
            old = group.primary
            with ha.failover():
                if lossy:
                    old.kill()
                    promoted = group.failover(dead=old.port)
                    old.extra_args = [*old.extra_args, "--replicaof", "127.0.0.1", str(promoted)]
                    old.start()
                    timeline.add("run", f"killed primary restarted as a replica of {promoted}")
                else:
                    promoted = group.failover()
            timeline.add("run", f"the Sentinels name {promoted}")
            comeback = ha.wait_comeback(120)
            timeline.add("run", "every reader delivered an event written after the failover")
            group.wait_replicating()
            timeline.add("run", "every server replicates the new primary")
            figures = ha.finish(drain_timeout=30).as_dict()
            stop.set()
            for watcher in watchers:
                watcher.join(5)
    finally:
        stop.set()
        for name in LIBRARY_LOGGERS:
            logging.getLogger(name).removeHandler(handler)
            logging.getLogger(name).propagate = True
    return {
        "acks": acks,
        "replicas": replicas,
        "sync_delay": sync_delay,
        "failover": "lossy" if lossy else "graceful",
        "comeback_seconds": round(comeback, 2),
        "events": sorted(timeline.events),
        "figures": figures,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.ha_timeline", description=__doc__)
    parser.add_argument("--acks", default="replicas=1")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument(
        "--sync-delay", type=int, default=0, help="the servers' repl-diskless-sync-delay (s)"
    )
    parser.add_argument("--lossy", action="store_true", help="SIGKILL the primary instead")
    args = parser.parse_args(argv)
    figures = run(args.acks, replicas=args.replicas, sync_delay=args.sync_delay, lossy=args.lossy)
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
