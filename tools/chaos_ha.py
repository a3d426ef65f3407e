"""HA chaos run: forced failovers of a Sentinel-managed primary/replica pair, one of them with a
lagging replica, under a writer, a reader group and two state-synchronizer clients.

    python -m tools.chaos ha [--seconds 40] [--acks leader|replicas=1] [--lag 2] [--fresh-writer]

A primary, a replica and 3 Sentinels are started for the run; the replica follows the primary
through a proxy, so its lag is real. At 25% of the run the proxy drops the replication stream
for ``--lag`` seconds (the replica falls behind while the writer goes on), then the primary is
SIGKILLed: the Sentinels promote the lagging replica (a lossy failover), and the killed server
is restarted as its replica. At 60% a graceful ``SENTINEL FAILOVER`` switches back. With
``--fresh-writer`` the writer is replaced by a new one after each failover (it never saw the
tails the lost primary had acknowledged).
Prints JSON (see :mod:`tools.ha_run` for the reader-group figures, plus
``silent_divergences``: state-synchronizer clients whose state differs from the log's without
a ``LogRegressedError``) and exits non-zero if an acknowledged-and-present event was skipped, a
(segment, offset) named two events without a reader being told (``DataLostError``), a client
diverged silently, a segment was handed out twice
at once, (with ``replicas=1``) an acknowledged event was lost, or readers were not all back
within their bound.

The bound on a comeback (every reader delivering an event written after the failover began) is
``session_timeout`` + the time until the deployment could acknowledge a write again in the run's
mode: for ``leader`` the failover itself (until the Sentinels name a primary that says so); for
``replicas=N`` until that primary also has N replicas with their link up, since no append can
be confirmed as replicated before (after a graceful ``SENTINEL FAILOVER`` of a pair, the
Sentinels demote the old primary at their next status check, up to 10 s later, and it must
resync). Both times are printed per failover (``failover_seconds``, ``durable_again_seconds``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from readergroup import ClientConfig
from readergroup.testing.embedded_redis import (
    EmbeddedRedisError,
    LocalSentinelGroup,
    local_sentinel_group,
    replicas_online,
)
from statesync import LogRegressedError, StateSyncError, StateSynchronizer, SyncConfig
from statesync.durability import Acks
from tests.support.model import ALL_TYPES, Add
from tests.support.proxy import ReplyDroppingProxy
from tools.ha_run import HaRun


class Counters:
    """Two synchronizer clients adding 1 to one counter in turns, across the failovers."""

    def __init__(self, url: str, acks: str) -> None:
        self.url = url
        config = SyncConfig(acks=Acks.parse(acks, timeout=1.0))
        self.clients = [
            StateSynchronizer.from_url(url, "ha-counter", update_types=ALL_TYPES, config=config)
            for _ in range(2)
        ]
        self.clients[0].initialize({"total": 0})
        self.regressions = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ha-counters", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        turn = 0
        while not self._stop.is_set():
            client = self.clients[turn % 2]
            turn += 1
            try:
                client.update_state(lambda state: [Add(1)])
            except LogRegressedError:
                self.regressions += 1  # told, not silent: adopt the log and go on
                with contextlib.suppress(StateSyncError):
                    client.resync()
            except StateSyncError:
                self.errors += 1  # an outage: tried again next turn
            self._stop.wait(0.02)

    def finish(self) -> int:
        """Stop; return how many clients hold a state other than the log's without knowing."""
        self._stop.set()
        self._thread.join(60)
        with StateSynchronizer.from_url(self.url, "ha-counter", update_types=ALL_TYPES) as fresh:
            fresh.fetch_updates()
            truth = fresh.state
        silent = 0
        for client in self.clients:
            try:
                client.fetch_updates()
            except LogRegressedError:
                self.regressions += 1
                continue
            if client.state != truth:
                silent += 1
            client.close()
        return silent


class DurabilityWatch:
    """From ``start()``: seconds until the Sentinels name a primary other than the one before
    and it has ``wanted`` replicas with their link up (polled every 50 ms in a thread of its
    own)."""

    def __init__(self, group: LocalSentinelGroup, wanted: int) -> None:
        self._group = group
        self._wanted = wanted
        self._before = group.primary_port()
        self._began = 0.0
        self._seconds: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ha-durability", daemon=True)

    def start(self) -> None:
        self._began = time.monotonic()
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.05):
            try:
                port = self._group.primary_port()
            except EmbeddedRedisError:  # no Sentinel answered this time: asked again
                continue
            if port != self._before and replicas_online(port) >= self._wanted:
                self._seconds = time.monotonic() - self._began
                return

    def seconds(self, timeout: float = 120.0) -> float:
        """The time found (waits for it up to ``timeout``; raises ``TimeoutError`` after)."""
        self._thread.join(timeout)
        self._done.set()
        if self._seconds is None:
            raise TimeoutError(f"the primary had no {self._wanted} replicas online in time")
        return self._seconds


@contextlib.contextmanager
def lagging_group(sync_delay: int = 0) -> Iterator[tuple[LocalSentinelGroup, ReplyDroppingProxy]]:
    """A Sentinel group whose replica follows the primary through a proxy (to make it lag);
    ``sync_delay``: the servers' ``repl-diskless-sync-delay``."""
    proxies: list[ReplyDroppingProxy] = []

    def relay(primary_port: int) -> int:
        proxies.append(ReplyDroppingProxy("127.0.0.1", primary_port))
        return proxies[-1].port

    try:
        with local_sentinel_group(
            replicas=1, sentinels=3, relay=relay, sync_delay=sync_delay
        ) as group:
            yield group, proxies[0]
    finally:
        for proxy in proxies:
            proxy.close()


def run(
    seconds: float, acks: str, lag: float, sync_delay: int = 0, fresh_writer: bool = False
) -> dict[str, Any]:
    with lagging_group(sync_delay) as (group, proxy):
        client = ClientConfig(acks=acks, ack_timeout=1.0)
        ha = HaRun(
            group.url, readers=3, segments=4, client=client, pause=0.05, fresh_writer=fresh_writer
        )
        counters = Counters(group.url, acks)
        ha.start()
        began = time.monotonic()
        comebacks = []
        failover_seconds = []
        durable_again = []
        wanted = Acks.parse(acks, timeout=1.0).replicas

        def until(fraction: float) -> None:
            time.sleep(max(0.0, began + fraction * seconds - time.monotonic()))

        until(0.25)
        primary = group.primary
        proxy.blackhole(True)  # the replica stops receiving: it falls behind
        time.sleep(lag)
        start = time.monotonic()
        watch = DurabilityWatch(group, wanted)
        watch.start()
        with ha.failover():
            primary.kill()
            promoted = group.failover(dead=primary.port)
        failover_seconds.append(time.monotonic() - start)
        proxy.blackhole(False)
        # back at once as a replica of the promoted server (as an orchestrator would restart
        # it), so that replicas=1 can be met again without waiting for the Sentinels
        primary.extra_args = [*primary.extra_args, "--replicaof", "127.0.0.1", str(promoted)]
        primary.start()
        comebacks.append(ha.wait_comeback(120))
        durable_again.append(max(failover_seconds[-1], watch.seconds()))
        group.wait_replicating()  # the Sentinels trust the replica: the next failover may pick it

        until(0.6)
        start = time.monotonic()
        watch = DurabilityWatch(group, wanted)
        watch.start()
        with ha.failover():
            group.failover()  # until the Sentinels name the promoted replica
        failover_seconds.append(time.monotonic() - start)
        comebacks.append(ha.wait_comeback(120))
        durable_again.append(max(failover_seconds[-1], watch.seconds()))
        group.wait_replicating()
        until(1.0)
        figures = ha.finish(drain_timeout=30).as_dict()
        figures.update(
            acks=acks,
            seconds=seconds,
            lag_seconds=lag,
            sync_delay=sync_delay,
            failover_seconds=[round(s, 2) for s in failover_seconds],
            comeback_seconds_each=[round(s, 2) for s in comebacks],
            durable_again_seconds=[round(s, 2) for s in durable_again],
            comeback_bound_seconds=[round(ha.group.session_timeout + s, 2) for s in durable_again],
            session_timeout=ha.group.session_timeout,
            silent_divergences=counters.finish(),
            synchronizer_regressions_reported=counters.regressions,
        )
    figures["ok"] = (
        figures["skipped"] == 0
        and figures["unreported_divergences"] == 0
        and figures["silent_divergences"] == 0
        and figures["overlaps"] == 0
        and (acks == "leader" or figures["lost"] == 0)
        and all(
            seconds <= bound
            for seconds, bound in zip(
                figures["comeback_seconds_each"], figures["comeback_bound_seconds"], strict=True
            )
        )
    )
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos ha", description=__doc__)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--acks", default="leader")
    parser.add_argument("--lag", type=float, default=2.0)
    parser.add_argument(
        "--sync-delay", type=int, default=0, help="the servers' repl-diskless-sync-delay (s)"
    )
    parser.add_argument("--fresh-writer", action="store_true")
    args = parser.parse_args(argv)
    figures = run(args.seconds, args.acks, args.lag, args.sync_delay, args.fresh_writer)
    figures["fresh_writer"] = args.fresh_writer
    print(json.dumps(figures, indent=2, sort_keys=True))
    return 0 if figures["ok"] else 1
