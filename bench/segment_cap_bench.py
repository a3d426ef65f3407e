"""Streams at the segment cap (issue 15): 10,000 segments per stream.

In one run, against one server (default configuration), for each size given (default 1,024 and
10,000 segments in one stream):

* ``create_s``: seconds to create the stream (metadata, every segment's keys).
* ``lone_reader_s``: seconds from ``create_reader`` until one reader owns every segment.
* ``merge``: all segments merged into one while the lone reader reads: seconds for
  ``scale_stream`` (metadata, seals, opening the successor), seconds until the reader completed
  every merged segment and owns the successor, and the group-log entries that took (one
  completion update each before issue 15's batching).
* ``split``: the merged segment split back into as many: seconds for ``scale_stream``.
* ``memory``: bytes in Redis per segment from ``MEMORY USAGE`` of each segment's keys (meta hash,
  event stream, writer table) just created (no event yet) and once every segment holds one
  event; the ``INFO memory`` growth across creation per segment; the stream's and the group's
  metadata (their synchronizers' keys) in bytes.
* ``get_stream_info_s`` and ``get_metrics_s``: one ``get_stream_info`` and one group
  ``get_metrics`` (lag per segment) at that size.

Prints JSON. ``--segments 1024`` alone runs on a build capped at 1,024 (the figures before).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import emit
from readergroup import (
    BytesSerializer,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.core.names import stream_sync_name
from readergroup.core.routing import key_position
from readergroup.testing.embedded_redis import redis_server


def _wait(condition: Callable[[], bool], limit: float = 600.0) -> float:
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > limit:
            raise TimeoutError(f"not reached within {limit} s")
        time.sleep(0.02)
    return time.monotonic() - began


def _keys_bytes(client: redis.Redis, keys: list[str]) -> int:
    total = 0
    for first in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for key in keys[first : first + 1000]:
            pipe.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0")
        total += sum(int(size or 0) for size in pipe.execute())
    return total


def _tagged_keys(client: redis.Redis, tag: str) -> list[str]:
    return [k.decode() for k in client.scan_iter(match=f"*{{{tag}}}*", count=10_000)]


def _segment_keys(client: redis.Redis, scope: str, stream: str) -> list[str]:
    return [k.decode() for k in client.scan_iter(match=f"*:{{{scope}/{stream}/*", count=10_000)]


def one_key_per_segment(ranges: list[tuple[float, float]]) -> list[str]:
    """A routing key falling in each range (ranges sorted, covering [0, 1))."""
    lows = [low for low, _ in ranges]
    found: dict[int, str] = {}
    i = 0
    while len(found) < len(ranges):
        key = f"k{i}"
        position = key_position(key)
        lo, hi = 0, len(lows) - 1
        while lo < hi:  # the last range whose low is <= position
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if lows[mid] <= position else (lo, mid - 1)
        found.setdefault(lo, key)
        i += 1
    return [found[i] for i in range(len(ranges))]


def at_size(url: str, segments: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    scope = f"c{uuid.uuid4().hex[:6]}"
    out: dict[str, Any] = {"segments": segments, "redis": client.info("server")["redis_version"]}
    with StreamManager.from_url(url) as sm:
        sm.create_scope(scope)
        used0 = int(client.info("memory")["used_memory"])
        began = time.monotonic()
        sm.create_stream(
            scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )
        out["create_s"] = round(time.monotonic() - began, 3)
        used1 = int(client.info("memory")["used_memory"])
        segment_keys = _segment_keys(client, scope, "s")
        memory: dict[str, Any] = {
            "segment_keys_created_bytes_per_segment": round(
                _keys_bytes(client, segment_keys) / segments, 1
            ),
            "used_memory_growth_on_create_bytes_per_segment": round((used1 - used0) / segments, 1),
        }
        began = time.monotonic()
        info = sm.get_stream_info(scope, "s")
        out["get_stream_info_s"] = round(time.monotonic() - began, 3)
        ranges = [(s.low, s.high) for s in info.active_segments]
    keys = one_key_per_segment(ranges)
    used1 = int(client.info("memory")["used_memory"])
    with (
        EventStreamClientFactory.from_url(scope, url) as factory,
        factory.create_event_writer("s", BytesSerializer()) as writer,
    ):
        for key in keys:
            writer.write_event(b"x" * 100, routing_key=key)
        writer.flush()
    used2 = int(client.info("memory")["used_memory"])
    memory["used_memory_growth_on_first_events_bytes_per_segment"] = round(
        (used2 - used1) / segments, 1
    )
    segment_keys = _segment_keys(client, scope, "s")
    memory["segment_keys_one_event_bytes_per_segment"] = round(
        _keys_bytes(client, segment_keys) / segments, 1
    )
    memory["segment_key_count_per_segment"] = round(len(segment_keys) / segments, 2)
    memory["stream_metadata_bytes"] = _keys_bytes(
        client, _tagged_keys(client, stream_sync_name(scope, "s"))
    )

    rgm = ReaderGroupManager.from_url(scope, url)
    rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))
    group = rgm.get_reader_group("g")
    stop = threading.Event()
    failures: list[str] = []

    def read() -> None:
        with EventStreamClientFactory.from_url(scope, url) as reader_factory:
            reader = reader_factory.create_reader("r", "g", BytesSerializer())
            try:
                while not stop.is_set():
                    reader.read_next_event(timeout=0.2)
            except Exception as exc:  # reported in the JSON, not hidden
                failures.append(f"{type(exc).__name__}: {exc}")
            finally:
                reader.close()

    def owned() -> int:
        return sum(map(len, group.get_segment_distribution().assigned.values()))

    began = time.monotonic()
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    _wait(lambda: owned() == segments)
    out["lone_reader_s"] = round(time.monotonic() - began, 3)
    memory["group_metadata_bytes"] = _keys_bytes(client, _tagged_keys(client, group.sync.name))
    began = time.monotonic()
    metrics = group.get_metrics()
    out["get_metrics_s"] = round(time.monotonic() - began, 3)
    out["lag_events"] = metrics.total.events
    out["memory"] = memory

    group.sync.fetch_updates()
    before = group.sync.revision
    with StreamManager.from_url(url) as sm:
        began = time.monotonic()
        (merged,) = sm.scale_stream(scope, "s", info_ids(sm, scope), [(0.0, 1.0)])
        scale_s = time.monotonic() - began

        def merged_done() -> bool:
            distribution = group.get_segment_distribution()
            return distribution.completed == segments and owned() == 1

        done_s = _wait(merged_done)
        group.sync.fetch_updates()
        out["merge"] = {
            "scale_stream_s": round(scale_s, 3),
            "scale_to_all_completed_s": round(scale_s + done_s, 3),
            "group_log_entries": group.sync.revision - before,
        }
        began = time.monotonic()
        split = sm.scale_stream(scope, "s", [merged], ranges)
        out["split"] = {"scale_stream_s": round(time.monotonic() - began, 3), "into": len(split)}
    stop.set()
    thread.join(60)
    out["reader_failures"] = failures
    rgm.close()
    client.close()
    return out


def info_ids(sm: StreamManager, scope: str) -> list[int]:
    return [s.segment_id for s in sm.stream_state(scope, "s").active_segments]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--segments", type=int, nargs="+", default=[1024, 10_000])
    parser.add_argument("--url", help="measure against this Redis instead of an embedded one")
    args = parser.parse_args()
    if args.url:
        results = {str(n): at_size(args.url, n) for n in args.segments}
    else:
        with redis_server() as server:
            results = {str(n): at_size(server.url, n) for n in args.segments}
    emit("segment_cap", results)


if __name__ == "__main__":
    main()
