"""Hostile bytes and shapes planted in Redis with raw redis-py: every reader, admin and CLI
ends in a typed error naming the key and revision or offsets, never a crash or a skip."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from readergroup import (
    BytesSerializer,
    CoordinationError,
    CorruptSegmentError,
    JsonSerializer,
    ReaderConfig,
    ReaderGroupConfig,
    ReaderGroupError,
    ReaderGroupManager,
    ReaderNotInGroupError,
    ScalingPolicy,
    SerializationError,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    TruncatedDataError,
    UTF8StringSerializer,
    key_position,
)
from readergroup.core.names import SCOPES_SYNC_NAME, catalog_sync_name, group_sync_name
from statesync import CorruptEntryError, EntryTooLargeError, StateSynchronizer, SyncConfig
from statesync.redis_backend import RedisLogBackend
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
)
from tests.support.hostile import hostile_entry
from tests.support.model import ALL_TYPES, Add, Put
from tests.support.waiting import wait_until
from tests.test_faults_security import FAST, setup_group

ROOT = Path(__file__).resolve().parent.parent


def plant(connection: Any, sync_name: str, payload: bytes) -> int:
    """Append ``payload`` to a synchronizer's log as a rogue client would; its revision."""
    outcome = connection.log_backend.append(
        sync_name, payload, expected_revision=None, writer="rogue", sequence=1, max_bytes=1 << 27
    )
    return int(outcome.revision)


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "readergroup.cli", *args],
        env={**os.environ, "REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


@flavoured_on_redis("sync", "async")
def test_a_deeply_nested_group_log_entry_is_a_typed_error_for_readers_and_the_cli(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    setup_group(redis_url, scope)
    with open_factory(scope, redis_url) as factory:
        reader = factory.create_reader("r", "g", UTF8StringSerializer())
        reader.read_next_event(timeout=0.2)
        name = group_sync_name(scope, "g")
        bad = plant(factory.connection, name, hostile_entry(200))
        errors: list[CoordinationError] = []

        def failed() -> bool:
            try:
                reader.read_next_event(timeout=0.05)
            except CoordinationError as exc:
                errors.append(exc)
            return bool(errors)

        wait_until(failed, 20, "the corrupt entry reported")
        cause = errors[0].__cause__
        assert isinstance(cause, CorruptEntryError) and cause.revision == bad
        assert name in str(cause) and "nested more than" in str(cause)
        reader._stop.set()
    done = cli(redis_url, "group", "describe", f"{scope}/g")
    assert done.returncode not in (-11, 0), done  # a clear error, not a crash
    assert "revision" in done.stdout + done.stderr
    restarted = subprocess.run(  # a fresh process reading the group does not crash either
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from readergroup import EventStreamClientFactory, UTF8StringSerializer, "
            "ReaderGroupError\n"
            "with EventStreamClientFactory.from_url(sys.argv[1], sys.argv[2]) as f:\n"
            "    try:\n"
            "        f.create_reader('r2', 'g', UTF8StringSerializer()).read_next_event(1)\n"
            "    except ReaderGroupError as exc:\n"
            "        print(type(exc.__cause__).__name__)\n",
            scope,
            redis_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert restarted.returncode == 0, restarted.stderr[-2000:]
    assert "CorruptEntryError" in restarted.stdout


def test_deeply_nested_catalog_entries_are_typed_errors_for_admins(private_redis: Any) -> None:
    url = private_redis.url
    with StreamManager.from_url(url) as manager:
        manager.create_scope("a")
        manager.list_scopes()
        bad_list = plant(manager.connection, SCOPES_SYNC_NAME, hostile_entry(200))
        bad_catalog = plant(manager.connection, catalog_sync_name("a"), hostile_entry(200))
    with StreamManager.from_url(url) as manager:
        for call, bad in (
            (manager.list_scopes, bad_list),
            (lambda: manager.list_streams("a"), bad_catalog),
        ):
            with pytest.raises(CoordinationError) as caught:
                call()
            assert isinstance(caught.value.__cause__, CorruptEntryError)
            assert caught.value.__cause__.revision == bad
    for args in (("stream", "list", "a"),):
        done = cli(url, *args)
        assert done.returncode not in (-11, 0), done
        assert "revision" in done.stdout + done.stderr


def make_group(url: str, scope: str, config: StreamConfiguration | None = None) -> None:
    with StreamManager.from_url(url) as sm:
        sm.create_stream(scope, "s", config)
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST))


def collect(reader: Any, until: Any, timeout: float = 30.0) -> list[Any]:
    """Read until ``until(results)``: events' values and typed errors, in order."""
    results: list[Any] = []

    def step() -> bool:
        try:
            results.extend(e.event for e in reader.read_batch(100, timeout=0.05))
        except ReaderGroupError as exc:
            if isinstance(exc, CoordinationError):
                raise
            results.append(exc)
        return bool(until(results))

    wait_until(step, timeout, "reading")
    return results


def rogue_xadd(client: redis.Redis, events_key: str, offset: int, payload: bytes) -> None:
    client.xadd(events_key, {"p": payload, "w": 0, "t": 0, "b": 0}, id=f"{offset + 1}-0")


def values_and_errors(results: list[Any]) -> tuple[list[Any], list[Exception]]:
    return (
        [r for r in results if not isinstance(r, Exception)],
        [r for r in results if isinstance(r, Exception)],
    )


class Picky:
    """An application's deserializer that raises something of its own on one event."""

    def serialize(self, value: str) -> bytes:
        return value.encode()

    def deserialize(self, data: bytes) -> str:
        if data == b"bad":
            raise KeyError("the application's own failure")
        return data.decode()


@flavoured_on_redis("sync", "async")
@pytest.mark.parametrize("serializer", ["json", "user"])
def test_any_deserializer_failure_is_a_serialization_error_and_nothing_before_it_is_lost(
    redis_url: str, scope: str, serializer: str, open_factory: Any
) -> None:
    make_group(redis_url, scope)
    bad = b"[" * 100_000 if serializer == "json" else b"bad"
    with open_factory(scope, redis_url) as factory:
        with factory.create_event_writer("s", BytesSerializer()) as writer:
            for i in range(10):
                writer.write_event(bad if i == 5 else b"%d" % i, routing_key="k")
        chosen: Any = JsonSerializer() if serializer == "json" else Picky()
        reader = factory.create_reader("r", "g", chosen)
        results = collect(reader, lambda r: len(r) >= 10)
        values, errors = values_and_errors(results)
        assert [int(v) for v in values] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
        assert results[5] is errors[0] and isinstance(errors[0], SerializationError)
        assert f"{scope}/s segment 0 offset 5" in str(errors[0])
        reader.close()
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        cut = rgm.get_reader_group("g").get_stream_cuts()[f"{scope}/s"]
        assert dict(cut.positions) == {0: 10}  # nothing committed past what was handed out


@flavoured_on_redis("sync", "async")
def test_oversized_stored_events_are_errors_not_deliveries(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    make_group(redis_url, scope, StreamConfiguration(max_event_size=1000))
    with open_factory(scope, redis_url) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("small", routing_key="k").result(5)
        meta, events, _ = factory.connection.keys.segment(scope, "s", 0)
        client = redis.Redis.from_url(redis_url)
        for offset in (1, 2):  # a rogue client bypasses the writer's size check
            rogue_xadd(client, events, offset, b"x" * 5000)
            client.hset(meta, "events", offset + 1)
        writer.write_event("after", routing_key="k").result(5)
        writer.close()
        with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
            results = collect(reader, lambda r: len(r) >= 4)
    values, errors = values_and_errors(results)
    assert values == ["small", "after"] and len(errors) == 2
    assert all("over the stream's max_event_size of 1000" in str(e) for e in errors)


@flavoured_on_redis("sync", "async")
def test_a_segment_key_of_the_wrong_type_does_not_block_the_others(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    make_group(redis_url, scope, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    with open_factory(scope, redis_url) as factory:
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(40):
                writer.write_event(f"e{i}", routing_key=f"k{i}")
        healthy = [f"e{i}" for i in range(40) if key_position(f"k{i}") < 0.5]  # segment 0
        _, broken, _ = factory.connection.keys.segment(scope, "s", 1)
        redis.Redis.from_url(redis_url).set(broken, "not a stream")  # a rogue overwrite
        with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
            results = collect(reader, lambda r: len(r) >= len(healthy) + 1)
    values, errors = values_and_errors(results)
    assert sorted(values) == sorted(healthy)
    assert len(errors) == 1 and isinstance(errors[0], CorruptSegmentError)
    assert broken in str(errors[0]) and "not a stream" in str(errors[0])


@flavoured_on_redis("sync", "async")
def test_a_rogue_offset_gap_stops_only_its_segment_after_the_good_events(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    make_group(redis_url, scope, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    with open_factory(scope, redis_url) as factory:
        conn = factory.connection
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(40):
                writer.write_event(f"a{i}", routing_key=f"k{i}")
        tail = conn.segments.segment_states(scope, "s", [0])[0].tail  # offsets 0..tail-1 are good
        events_key = conn.keys.segment(scope, "s", 0)[1]
        rogue_xadd(redis.Redis.from_url(redis_url), events_key, tail + 14, b"rogue")
        with factory.create_reader("r", "g", UTF8StringSerializer()) as reader:
            first = collect(reader, lambda r: len(r) >= 41)
            later = [f"b{i}" for i in range(40) if key_position(f"k{i}") >= 0.5]  # segment 1
            with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
                for event in later:
                    writer.write_event(event, routing_key=f"k{event[1:]}")
            more = collect(reader, lambda r: len(r) >= len(later))
    values, errors = values_and_errors(first)
    assert sorted(values) == sorted(f"a{i}" for i in range(40))  # nothing before the gap lost
    assert len(errors) == 1 and isinstance(errors[0], CorruptSegmentError)
    assert f"after offset {tail - 1} has offset {tail + 14}" in str(errors[0]), errors[0]
    assert events_key in str(errors[0])
    assert sorted(more) == sorted(later)  # the healthy segment keeps flowing


@flavoured_on_redis("sync", "async")
def test_truncation_under_a_reader_is_reported_once_then_everything_that_exists_comes(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    make_group(redis_url, scope)
    with open_factory(scope, redis_url) as factory:
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(200):
                writer.write_event(f"e{i}", routing_key="k")
        config = ReaderConfig(read_batch=20, max_buffered_events=20)
        reader = factory.create_reader("r", "g", UTF8StringSerializer(), config)
        got = collect(reader, lambda r: len(r) >= 20)
        with StreamManager.from_url(redis_url) as sm:
            sm.truncate_stream(scope, "s", StreamCut(scope, "s", {0: 100}))
        got += collect(reader, lambda r: r and r[-1] == "e199")
        reader.close()
    values, errors = values_and_errors(got)
    assert len(errors) == 1 and isinstance(errors[0], TruncatedDataError)
    assert "below the head 100" in str(errors[0])
    before = [v for v in values if int(v[1:]) < 100]
    assert before == [f"e{i}" for i in range(len(before))]  # in order, up to the error
    assert [v for v in values if int(v[1:]) >= 100] == [f"e{i}" for i in range(100, 200)]


@flavoured_on_redis("sync", "async")
def test_a_segment_truncated_away_under_a_reader_is_reported_once_and_reading_moves_on(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    make_group(redis_url, scope)
    with open_factory(scope, redis_url) as factory:
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(60):
                writer.write_event(f"a{i}", routing_key="k")
        config = ReaderConfig(read_batch=10, max_buffered_events=10)
        reader = factory.create_reader("r", "g", UTF8StringSerializer(), config)
        got = collect(reader, lambda r: len(r) >= 10)
        with StreamManager.from_url(redis_url) as sm:
            successors = sm.scale_stream(scope, "s", [0], [(0.0, 0.5), (0.5, 1.0)])
            with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
                for i in range(20):
                    writer.write_event(f"b{i}", routing_key=f"k{i}")
            sm.truncate_stream(scope, "s", StreamCut(scope, "s", dict.fromkeys(successors, 0)))
        got += collect(reader, lambda r: len([v for v in r if str(v).startswith("b")]) >= 20)
        reader.close()
    values, errors = values_and_errors(got)
    assert len(errors) == 1 and isinstance(errors[0], TruncatedDataError)
    assert "deleted segment" in str(errors[0])
    assert sorted(v for v in values if v.startswith("b")) == sorted(f"b{i}" for i in range(20))


class Heard:
    """A rebalance listener that records what it hears."""

    def __init__(self) -> None:
        self.lost: list[Any] = []
        self.acquired: list[Any] = []

    def on_segments_acquired(self, reader_id: str, segments: Any) -> None:
        self.acquired += segments

    def on_segments_released(self, reader_id: str, segments: Any) -> None:
        return None

    def on_segments_lost(self, reader_id: str, segments: Any) -> None:
        self.lost += segments


def fresh_heartbeat(url: str, key: str) -> float:
    """Wait until reader ``r``'s heartbeat in ``key`` changes; return when (monotonic) it was
    last seen unchanged: the beat that changed it was sent after that (give or take its own
    transit), and fencing must wait a session from it."""
    with redis.Redis.from_url(url) as client:
        seen = time.monotonic()
        before = client.hget(key, "r")
        wait_until(lambda: client.hget(key, "r") != before, 30, "a fresh heartbeat")
    return seen


@flavoured_on_redis("sync", "async")
def test_reads_return_nothing_in_an_outage_then_fence_and_run_rejoins_by_itself(
    private_redis: Any, open_factory: Any
) -> None:
    url = private_redis.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope("o")
    make_group(url, "o")
    with open_factory("o", url) as factory:
        reader = factory.create_reader("r", "g", UTF8StringSerializer())
        heard = Heard()
        reader.add_rebalance_listener(heard)
        writer = factory.create_event_writer("s", UTF8StringSerializer())
        writer.write_event("one", routing_key="k").result(5)
        assert collect(reader, lambda r: r == ["one"]) == ["one"]
        first_generation = reader.generation
        # the session counts from the last heartbeat that succeeded, which a loaded machine can
        # send late: stop the server right after a beat sent after ``outage`` has landed
        outage = fresh_heartbeat(url, factory.connection.keys.heartbeats(group_sync_name("o", "g")))
        private_redis.stop()
        fenced: list[Exception] = []

        def read_in_outage() -> bool:
            try:  # never RedisUnavailableError: no event, until the session is over
                assert reader.read_batch(10, timeout=0.1) == []
            except ReaderNotInGroupError as exc:
                fenced.append(exc)
            return bool(fenced)

        wait_until(read_in_outage, 60, "fenced after the session timeout")
        # not before the session (counted from the last heartbeat sent before the outage)
        assert time.monotonic() - outage >= FAST["session_timeout"] - FAST["heartbeat_interval"]
        assert heard.lost == [("o/s", 0)]
        private_redis.start()
        handled: list[str] = []
        stop = threading.Event()
        runner = threading.Thread(
            target=reader.run,
            args=(lambda e: handled.append(e.event),),
            kwargs={"stop": stop, "handle_signals": False},
        )
        runner.start()
        try:
            writer.write_event("two", routing_key="k").result(60)
            wait_until(lambda: "two" in handled, 60, "the run rejoined and read on")
        finally:
            stop.set()
            runner.join(60)
        assert reader.generation > first_generation
        assert heard.acquired.count(("o/s", 0)) == 2
        writer.close()
        reader.close()


def sent_bytes(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


def test_an_oversized_log_entry_is_refused_in_redis_not_transferred_again_and_again(
    redis_url: str, unique_name: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    sync = StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES)
    sync.initialize({"total": 0})
    sync.update_state(lambda s: [Add(1)])
    backend = RedisLogBackend.from_url(redis_url)
    bad = backend.append(
        unique_name,
        b"x" * 3_000_000,
        expected_revision=None,
        writer="rogue",
        sequence=1,
        max_bytes=1 << 27,
    ).revision
    before = sent_bytes(client)
    for _ in range(5):
        with pytest.raises(CorruptEntryError) as caught:
            sync.fetch_updates()
        assert caught.value.revision == bad and "over max_entry_bytes" in str(caught.value)
    assert sent_bytes(client) - before < 1_000_000  # 5 refreshes never moved the 3 MB
    assert sync.state == {"total": 1}
    sync.close()
    backend.close()


def test_an_oversized_snapshot_is_never_written_and_never_read(
    redis_url: str, unique_name: str
) -> None:
    small = SyncConfig(max_snapshot_bytes=1000)
    sync = StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES, config=small)
    sync.initialize({"total": 0})
    sync.update_state(lambda s: [Put("k" * 2000, 1)])
    with pytest.raises(EntryTooLargeError, match="max_snapshot_bytes"):
        sync.compact()
    big = StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES)
    big.fetch_updates()
    big.compact()  # another client with a larger limit writes a 2 kB snapshot
    big.update_state(lambda s: [Add(1)])
    big.compact()
    fresh = StateSynchronizer.from_url(redis_url, unique_name, update_types=ALL_TYPES, config=small)
    with pytest.raises(CorruptEntryError, match="over max_snapshot_bytes"):
        fresh.fetch_updates()
    for client in (sync, big, fresh):
        client.close()


@flavoured_on_redis("sync", "async")
def test_a_reader_does_not_pull_an_oversized_group_log_entry_on_every_refresh(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    setup_group(redis_url, scope)
    client = redis.Redis.from_url(redis_url)
    with open_factory(scope, redis_url) as factory:
        reader = factory.create_reader("r", "g", UTF8StringSerializer())
        reader.read_next_event(timeout=0.2)
        bad = plant(factory.connection, group_sync_name(scope, "g"), b"x" * 3_000_000)
        errors: list[CoordinationError] = []

        def failed() -> bool:
            try:
                reader.read_next_event(timeout=0.05)
            except CoordinationError as exc:
                errors.append(exc)
            return len(errors) >= 3

        wait_until(failed, 30, "the oversized entry reported")
        before = sent_bytes(client)
        wait_until(lambda: failed() and len(errors) >= 8, 30, "more refreshes")
        assert sent_bytes(client) - before < 1_000_000  # five more refreshes, no 3 MB moved
        cause = errors[-1].__cause__
        assert isinstance(cause, CorruptEntryError) and cause.revision == bad
        reader._stop.set()


@flavoured_on_redis("sync", "async")
def test_a_group_log_of_the_wrong_type_does_not_stop_the_events(
    redis_url: str, scope: str, open_factory: Any
) -> None:
    setup_group(redis_url, scope)
    with open_factory(scope, redis_url) as factory:
        reader = factory.create_reader("r", "g", UTF8StringSerializer())
        reader.read_next_event(timeout=0.2)
        name = group_sync_name(scope, "g")
        log = factory.connection.log_backend.keys(name).log
        client = redis.Redis.from_url(redis_url)
        client.delete(log)
        client.set(log, "not a stream")  # a rogue overwrite of the group's state log
        with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
            for i in range(3):
                writer.write_event(f"e{i}", routing_key="k")
        got: list[Any] = []

        def step() -> bool:
            try:
                got.extend(e.event for e in reader.read_batch(10, timeout=0.05))
            except CoordinationError as exc:  # a commit cannot land: named, typed
                got.append(exc)
            return len([g for g in got if isinstance(g, str)]) >= 3

        wait_until(step, 30, "the events read")
        values, errors = values_and_errors(got)
        assert values == ["e0", "e1", "e2"]
        assert all(name in str(e) for e in errors)
        reader._stop.set()
