"""The web console (issue 33): pages rendered in a real headless Chromium, and the console's own
load on Redis.

In one run, against one server:

* ``render``: for each page, the browser's figures from a fresh load: ``first_render_ms``
  (navigation start until the page drew its first data: HTML, scripts, the first server-sent
  event with the view read from Redis, and drawing it) and ``render_ms`` (drawing one update
  in JavaScript), median of ``--loads`` loads. Pages: the baseline stream (4 segments, no
  scaling) and its group (1 reader), the big stream (1,024 open segments after 40 scalings:
  20 splits and 20 merges) and a group of 128 readers on it. ``ratio``: big page over its
  baseline.
* ``redis_load``: commands per second the console sends (``INFO commandstats``, the bench's own
  INFO calls excluded) with 10 groups on the 1,024-segment stream, over ``--seconds``: idle
  (only the background lag sampler), 1 browser-like viewer of the overview, and 10 viewers
  (overview and every group page, server-sent events read in threads). ``ratio``: over one
  Prometheus scrape per second of the same groups (the exporter's commands per scrape,
  measured in the same run).

Prints JSON; screenshots of the two big pages go to ``.artifacts/console/``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from prometheus_client import CollectorRegistry, generate_latest

from bench.common import emit, median
from readergroup import (
    StreamManager,
)
from readergroup.admin.group_manager import join_group
from readergroup.admin.metrics import register_metrics
from readergroup.storage.connection import RedisConnection
from readergroup.testing.embedded_redis import redis_server
from tests.support.browser import chromium, console, open_view, screenshot
from tests.support.console_setup import make_group, make_stream

LONG_SESSION = {"session_timeout": 600.0, "heartbeat_interval": 60.0}


def build_stream(url: str, scope: str, name: str, segments: int, scalings: int) -> None:
    """``segments`` open segments after ``scalings`` scalings (a split then a merge back, in
    turn), holding four events per segment."""
    make_stream(url, scope, segments, segments * 4, name)
    with StreamManager.from_url(url) as sm:
        for n in range(scalings // 2):
            state = sm.stream_state(scope, name)
            record = sorted(state.active_segments, key=lambda r: r.low)[n % segments]
            middle = (record.low + record.high) / 2
            pieces = sm.scale_stream(
                scope, name, [record.segment_id], [(record.low, middle), (middle, record.high)]
            )
            sm.scale_stream(scope, name, pieces, [(record.low, record.high)])


def build_group(url: str, scope: str, group: str, stream: str, readers: int) -> None:
    """A group on ``stream`` whose ``readers`` members joined and took their shares (members
    driven through the group protocol directly: no reader threads to perturb the figures)."""
    make_group(url, scope, group, stream, **LONG_SESSION)
    connection = RedisConnection.from_url(url)
    members = [join_group(connection, scope, group, f"reader-{n:03d}")[0] for n in range(readers)]
    for _ in range(2):
        for member in members:
            member.heartbeat()
            member.rebalance({})
    connection.close()


def render_figures(driver: Any, url: str, loads: int) -> dict[str, float]:
    first, draw = [], []
    for _ in range(loads):
        open_view(driver, url, timeout=60)
        first.append(driver.execute_script("return window.consoleFirstRenderAt"))
        draw.append(driver.execute_script("return window.consoleRenderMs"))
    return {"first_render_ms": round(median(first), 1), "render_ms": round(median(draw), 1)}


def commands(probe: redis.Redis) -> int:
    stats: dict[str, Any] = probe.info("commandstats")  # type: ignore[assignment]
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


def watch(url: str, stop: threading.Event) -> None:
    """A viewer: read the server-sent events of ``url`` until ``stop``."""
    with urllib.request.urlopen(url, timeout=30) as response:
        while not stop.is_set():
            response.readline()


def load_figures(probe: redis.Redis, base: str, views: list[str], seconds: float) -> float:
    stop = threading.Event()
    viewers = [threading.Thread(target=watch, args=(base + v, stop), daemon=True) for v in views]
    for viewer in viewers:
        viewer.start()
    time.sleep(2)  # the viewers connected and their first pushes went out
    before, began = commands(probe), time.monotonic()
    time.sleep(seconds)
    rate = (commands(probe) - before) / (time.monotonic() - began)
    stop.set()
    for viewer in viewers:
        viewer.join(10)
    return round(rate, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=1024)
    parser.add_argument("--scalings", type=int, default=40)
    parser.add_argument("--readers", type=int, default=128)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--loads", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    scope = f"b{uuid.uuid4().hex[:8]}"
    results: dict[str, Any] = {}
    with redis_server() as server:
        url = server.url
        with StreamManager.from_url(url) as sm:
            sm.create_scope(scope)
        began = time.monotonic()
        build_stream(url, scope, "small", 4, 0)
        build_stream(url, scope, "big", args.segments, args.scalings)
        build_group(url, scope, "small-group", "small", 1)
        build_group(url, scope, "big-group", "big", args.readers)
        for n in range(args.groups - 1):
            build_group(url, scope, f"g{n}", "big", 0)
        results["setup_s"] = round(time.monotonic() - began, 1)
        with console(url) as base, chromium() as driver:
            pages = {
                "stream_baseline": f"{base}#/stream/{scope}/small",
                "stream_big": f"{base}#/stream/{scope}/big",
                "group_baseline": f"{base}#/group/{scope}/small-group",
                "group_big": f"{base}#/group/{scope}/big-group",
            }
            render = {
                name: render_figures(driver, page, args.loads) for name, page in pages.items()
            }
            for kind in ("stream", "group"):
                big, small = render[f"{kind}_big"], render[f"{kind}_baseline"]
                ratio = big["first_render_ms"] / small["first_render_ms"]
                big["ratio_first_render"] = round(ratio, 2)
            open_view(driver, pages["stream_big"], timeout=60)
            render["stream_big"]["segments_drawn"] = driver.execute_script(
                "return document.querySelectorAll('svg.segment-graph rect.seg').length"
            )
            screenshot(driver, "bench-stream-1024-segments")
            open_view(driver, pages["group_big"], timeout=60)
            render["group_big"]["readers_drawn"] = driver.execute_script(
                "return document.querySelectorAll('#ownership .reader[data-reader]').length"
            )
            screenshot(driver, "bench-group-128-readers")
            results["render"] = render
        probe = redis.Redis.from_url(url)
        connection = RedisConnection.from_url(url)
        registry = CollectorRegistry()
        register_metrics(registry, connection, [scope])
        before = commands(probe)
        generate_latest(registry)
        scrape = commands(probe) - before
        connection.close()
        with StreamManager.from_url(url) as sm:  # only the big stream's groups from here
            sm.seal_stream(scope, "small")
        group_views = [f"api/events/group/{scope}/big-group"] + [
            f"api/events/group/{scope}/g{n}" for n in range(args.groups - 1)
        ]
        with console(url) as base:
            load = {
                "idle": load_figures(probe, base, [], args.seconds),
                "one_viewer": load_figures(probe, base, ["api/events/overview"], args.seconds),
                "ten_viewers": load_figures(
                    probe, base, ["api/events/overview", *group_views[:9]], args.seconds
                ),
            }
        load["prometheus_scrape_commands"] = scrape
        for name in ("idle", "one_viewer", "ten_viewers"):
            load[f"{name}_ratio_to_scrape_per_s"] = round(load[name] / scrape, 2)
        results["redis_load_commands_per_s"] = load
        probe.close()
    results["config"] = vars(args)
    emit("console", results)


if __name__ == "__main__":
    main()
