"""Write benchmark: writer throughput and Redis CPU per event, against plain pipelined XADD.

In one run, against one private server (nothing else talks to it), with the same events
(``--events`` of ``--size`` bytes, routing keys ``k0..k999``), each into a fresh one-segment
stream or key, alternating, best of ``--repeat``:

* ``xadd_same_fields``: raw redis-py pipelined ``XADD key * k <key> p <payload> w <ms> t <ms>
  b <bytes>`` (1000 per pipeline: the writer's batch, ``max_batch_events``): the fields the
  library stores, without any of its checks;
* ``xadd_same_fields_rounds``: the same with 16,000 per pipeline (the writer's largest round:
  16 batches per round trip), so neither side has the larger round trips;
* ``xadd_kp``: the same as ``xadd_same_fields`` with fields ``k`` and ``p`` only
  (``bench/stream_bench.py``'s baseline);
* ``writer``: ``EventStreamWriter.write_event`` + ``flush`` (bulk rounds as native ``XADD``s in
  a ``WATCH``ed ``MULTI``/``EXEC``, ``readergroup/storage/native_append.py``);
* ``writer_script``: the same writer with every round through ``append_events.lua`` (one
  ``redis.call`` per event: the path before the native one, for comparison in the same run);
* ``xadd_trickle``: ``--trickle-events`` single ``XADD`` calls with the same fields, each
  waited for (an application writing one event at a time);
* ``writer_trickle``: the writer with each ``write_event`` waited for (``result()``), so each
  round is one event through ``append_events.lua``: what a small append costs the server
  (``server_commands_per_event``, from ``INFO commandstats``, is reported for both).

For each: events/s (wall clock of the client), the client's CPU seconds per million events
(this process, every thread: what bounds throughput when the machine is shared) and Redis CPU
seconds per million events (the server's ``used_cpu_sys`` + ``used_cpu_user`` before and
after). Ratios: writer events/s over the faster of the two ``xadd_same_fields`` baselines
(goal >= 0.95), writer Redis CPU over ``xadd_same_fields`` (goal <= 1.3); ``writer_trickle``
over ``xadd_trickle`` (events/s, Redis CPU, server commands per event). The machine's load
average is reported with the figures. Prints JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.common import emit
from readergroup import BytesSerializer, EventStreamClientFactory, StreamManager
from readergroup.storage import native_append
from readergroup.testing.embedded_redis import local_redis_server


def server_cpu(client: redis.Redis) -> float:
    info: dict[str, Any] = client.info("cpu")  # type: ignore[assignment]
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def measured(client: redis.Redis, run: Callable[[], None]) -> tuple[float, float, float]:
    """Wall seconds of ``run``, this process's CPU seconds in it and the Redis CPU seconds it
    caused."""
    time.sleep(0.2)  # let the server finish anything earlier
    before = server_cpu(client)
    began, began_cpu = time.perf_counter(), time.process_time()
    run()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - began_cpu
    time.sleep(0.2)
    return elapsed, cpu, server_cpu(client) - before


def raw_xadd(
    client: redis.Redis,
    key: str,
    payloads: list[bytes],
    keys: list[str],
    full: bool,
    per_round: int = 1000,
) -> Callable[[], None]:
    def run() -> None:
        offset = 0
        for start in range(0, len(payloads), per_round):
            pipe = client.pipeline(transaction=False)
            now = int(time.time() * 1000)
            for i in range(start, min(start + per_round, len(payloads))):
                fields: dict[Any, Any] = {"k": keys[i], "p": payloads[i]}
                if full:
                    fields.update(w=now, t=now, b=offset)
                    offset += len(payloads[i])
                pipe.xadd(key, fields)
            pipe.execute()

    return run


def writer_run(
    factory: EventStreamClientFactory, stream: str, payloads: list[bytes], keys: list[str]
) -> Callable[[], None]:
    def run() -> None:
        writer = factory.create_event_writer(stream, BytesSerializer())
        write = writer.write_event
        for payload, key in zip(payloads, keys, strict=True):
            write(payload, key)
        writer.flush()
        writer.close()

    return run


def xadd_trickle(
    client: redis.Redis, key: str, payloads: list[bytes], keys: list[str]
) -> Callable[[], None]:
    def run() -> None:
        offset = 0
        for payload, routing_key in zip(payloads, keys, strict=True):
            now = int(time.time() * 1000)
            client.xadd(key, {"k": routing_key, "p": payload, "w": now, "t": now, "b": offset})
            offset += len(payload)

    return run


def writer_trickle(
    factory: EventStreamClientFactory, stream: str, payloads: list[bytes], keys: list[str]
) -> Callable[[], None]:
    def run() -> None:
        with factory.create_event_writer(stream, BytesSerializer()) as writer:
            for payload, key in zip(payloads, keys, strict=True):
                writer.write_event(payload, key).result(30)

    return run


def commands(client: redis.Redis) -> int:
    """Commands the server has run since the last ``CONFIG RESETSTAT`` (scripts' included)."""
    stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
    return sum(int(stat["calls"]) for stat in stats.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--trickle-events", type=int, default=5_000)
    args = parser.parse_args()
    payloads = [bytes([65 + i % 26]) * args.size for i in range(args.events)]
    keys = [f"k{i % 1000}" for i in range(args.events)]
    best: dict[str, tuple[float, float, float]] = {}
    sent: dict[str, int] = {}  # server commands of a trickle run
    trickle = min(args.trickle_events, args.events)
    load_before = os.getloadavg()
    native_minimum = native_append.MIN_EVENTS
    with local_redis_server() as server:
        client = redis.Redis.from_url(server.url)
        scope = f"wb{uuid.uuid4().hex[:6]}"
        with (
            StreamManager.from_url(server.url) as sm,
            EventStreamClientFactory.from_url(scope, server.url) as factory,
        ):
            sm.create_scope(scope)
            for run in range(args.repeat):
                for name in ("writer", "writer_script"):
                    sm.create_stream(scope, f"{name}{run}")
                runs = {
                    "xadd_same_fields": raw_xadd(client, f"raw{run}", payloads, keys, True),
                    "xadd_same_fields_rounds": raw_xadd(
                        client, f"rounds{run}", payloads, keys, True, 16_000
                    ),
                    "writer": writer_run(factory, f"writer{run}", payloads, keys),
                    "writer_script": writer_run(factory, f"writer_script{run}", payloads, keys),
                    "xadd_kp": raw_xadd(client, f"kp{run}", payloads, keys, False),
                }
                for name, work in runs.items():
                    native_append.MIN_EVENTS = 10**12 if name == "writer_script" else native_minimum
                    figures = measured(client, work)
                    old = best.get(name)
                    best[name] = tuple(map(min, old, figures)) if old else figures  # type: ignore[assignment]
                native_append.MIN_EVENTS = native_minimum
                client.delete(f"raw{run}", f"rounds{run}", f"kp{run}")  # discarded afterwards
                sm.create_stream(scope, f"trickle{run}")
                trickles = {
                    "xadd_trickle": xadd_trickle(
                        client, f"xt{run}", payloads[:trickle], keys[:trickle]
                    ),
                    "writer_trickle": writer_trickle(
                        factory, f"trickle{run}", payloads[:trickle], keys[:trickle]
                    ),
                }
                for name, work in trickles.items():
                    client.config_resetstat()
                    figures = measured(client, work)
                    sent[name] = commands(client) - 1  # the count's own INFO excluded
                    old = best.get(name)
                    best[name] = tuple(map(min, old, figures)) if old else figures  # type: ignore[assignment]
                client.delete(f"xt{run}")
        client.close()
    results: dict[str, Any] = {
        "events": args.events,
        "trickle_events": trickle,
        "event_bytes": args.size,
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    for name, (seconds, client_cpu, cpu) in best.items():
        count = trickle if name in sent else args.events
        results[name] = {
            "events_per_s": round(count / seconds),
            "client_cpu_s_per_million_events": round(client_cpu / count * 1e6, 3),
            "redis_cpu_s_per_million_events": round(cpu / count * 1e6, 3),
        }
        if name in sent:
            results[name]["server_commands_per_event"] = round(sent[name] / count, 2)
    trickled, plain = results["writer_trickle"], results["xadd_trickle"]
    for figure in ("events_per_s", "redis_cpu_s_per_million_events", "server_commands_per_event"):
        trickled[f"{figure}_ratio_to_xadd_trickle"] = round(trickled[figure] / plain[figure], 2)
    base_rate = max(
        results[name]["events_per_s"] for name in ("xadd_same_fields", "xadd_same_fields_rounds")
    )
    base_client = results["xadd_same_fields"]["client_cpu_s_per_million_events"]
    base_cpu = results["xadd_same_fields"]["redis_cpu_s_per_million_events"]
    for name in ("writer", "writer_script", "xadd_kp", "xadd_same_fields_rounds"):
        results[name]["throughput_ratio_to_faster_xadd_same_fields"] = round(
            results[name]["events_per_s"] / base_rate, 2
        )
        results[name]["client_cpu_ratio_to_xadd_same_fields"] = round(
            results[name]["client_cpu_s_per_million_events"] / base_client, 2
        )
        results[name]["cpu_ratio_to_xadd_same_fields"] = round(
            results[name]["redis_cpu_s_per_million_events"] / base_cpu, 2
        )
    results["server"] = "valkey/redis binary, private"
    emit("write", results)


if __name__ == "__main__":
    main()
