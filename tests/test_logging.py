"""The library's log records (caplog, real Redis): membership and ownership changes at INFO,
fencing and retried outages at WARNING with the exception, nothing per event; the CLI's -v."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ReaderNotInGroupError,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin.retention import RetentionManager
from readergroup.client.runner import _Runner
from readergroup.core.names import group_sync_name
from readergroup.testing.embedded_redis import LocalRedisServer
from statesync import BackendUnavailableError, RetryPolicy, StateSynchronizer, SyncConfig, Update
from statesync.redis_backend import RedisLogBackend
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
    url_factory_fixture,  # noqa: F401 (a fixture)
)
from tests.support.cli import cli
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.1}
MEMBER = "readergroup.admin.group_member"


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every record of the library's loggers from DEBUG up."""
    caplog.set_level(logging.DEBUG, logger="readergroup")
    caplog.set_level(logging.DEBUG, logger="statesync")
    return caplog


def logged(
    caplog: pytest.LogCaptureFixture, logger: str, level: int, *words: str
) -> list[logging.LogRecord]:
    """The records of ``logger`` at ``level`` whose message holds every one of ``words``."""
    return [
        r
        for r in list(caplog.records)
        if r.name == logger and r.levelno == level and all(w in r.getMessage() for w in words)
    ]


def waiting_for(
    caplog: pytest.LogCaptureFixture, logger: str, level: int, *words: str
) -> Callable[[], list[logging.LogRecord]]:
    return lambda: logged(caplog, logger, level, *words)


def stream_and_group(redis_url: str, scope: str, segments: int = 2, **config: Any) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(
            scope, "orders", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("billing", ReaderGroupConfig(streams=[f"{scope}/orders"], **config))


@flavoured_on_redis()
def test_a_join_and_a_rebalance_log_info_naming_the_reader_and_the_segments(
    redis_url: str, scope: str, factory: EventStreamClientFactory, records: Any
) -> None:
    stream_and_group(redis_url, scope, **FAST)
    one = factory.create_reader("one", "billing", UTF8StringSerializer())
    one.read_next_event(timeout=0.3)
    names = sorted(f"{scope}/orders/{segment}" for _, segment in one.owned_segments())
    assert len(names) == 2
    assert logged(records, MEMBER, logging.INFO, "'one' joined", f"group:{scope}/billing")
    [acquired] = logged(records, MEMBER, logging.INFO, "'one' acquired 2 segments", *names)
    two = factory.create_reader("two", "billing", UTF8StringSerializer())

    def balanced() -> bool:
        one.read_next_event(timeout=0.05)
        two.read_next_event(timeout=0.05)
        return len(one.owned_segments()) == len(two.owned_segments()) == 1

    wait_until(balanced, what="one segment each")
    [(stream, segment)] = two.owned_segments()
    name = f"{stream}/{segment}"
    assert logged(records, MEMBER, logging.INFO, "'one' released 1 segment (", name)
    assert logged(records, MEMBER, logging.INFO, "'two' acquired 1 segment (", name)
    two.close()
    assert logged(records, MEMBER, logging.INFO, "'two' (generation", "left")
    one.close()
    assert acquired.levelname == "INFO"


@flavoured_on_redis("sync", "async")
def test_a_fenced_reader_logs_a_warning(
    redis_url: str, scope: str, factory: EventStreamClientFactory, records: Any
) -> None:
    stream_and_group(redis_url, scope, **FAST)
    reader = factory.create_reader("victim", "billing", UTF8StringSerializer())
    reader.read_next_event(timeout=0.3)
    group = ReaderGroupManager.from_url(scope, redis_url).get_reader_group("billing")
    assert group.reader_offline("victim") is True
    assert logged(
        records, "readergroup.admin.group_manager", logging.INFO, "'victim'", "declared offline"
    )
    with pytest.raises(ReaderNotInGroupError):
        for _ in range(50):
            reader.read_next_event(timeout=0.1)
    fenced = [
        r
        for r in records.records
        if r.name.startswith("readergroup.client.")
        and r.levelno == logging.WARNING
        and "'victim'" in r.getMessage()
        and ("fenced" in r.getMessage() or "removed from the group" in r.getMessage())
    ]
    assert fenced, [r.getMessage() for r in records.records]
    reader.close()


@flavoured_on_redis()
def test_a_dead_readers_removal_logs_info(
    redis_url: str, scope: str, factory: EventStreamClientFactory, records: Any
) -> None:
    stream_and_group(redis_url, scope, **FAST)
    dead = factory.create_reader("dead", "billing", UTF8StringSerializer())
    survivor = factory.create_reader("survivor", "billing", UTF8StringSerializer())
    dead._stop.set()  # a crash: no more heartbeats, no graceful leave
    removal = waiting_for(records, MEMBER, logging.INFO, "'survivor' removed dead reader 'dead'")
    wait_until(removal, what="the dead reader removed")
    assert "session timeout (1500 ms)" in removal()[0].getMessage()
    survivor.close()
    dead.close()


@flavoured_on_redis("sync", "async")
def test_steady_state_reading_logs_nothing_per_event(
    redis_url: str, scope: str, factory: EventStreamClientFactory, records: Any
) -> None:
    stream_and_group(redis_url, scope, auto_commit_interval=0.05)
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i in range(300):
            writer.write_event(f"e{i}", routing_key=f"k{i % 16}")
    reader = factory.create_reader("steady", "billing", UTF8StringSerializer())
    assert reader.read_next_event(timeout=2).event is not None
    records.clear()  # joined and acquired: steady state from here
    for _ in range(299):
        assert reader.read_next_event(timeout=2).event is not None
    assert len(records.records) <= 3, [r.getMessage() for r in records.records]
    reader.close()


@dataclass(frozen=True)
class Add(Update):
    amount: int

    def apply_to(self, state: Any) -> Any:
        return state + self.amount


def test_a_retried_outage_logs_a_warning_with_the_exception(
    private_redis: LocalRedisServer, records: Any
) -> None:
    config = SyncConfig(retry=RetryPolicy(deadline=60.0, max_attempts=100_000, max_delay=0.05))
    backend = RedisLogBackend.from_url(private_redis.url)
    sync: StateSynchronizer[int] = StateSynchronizer(
        backend, "counter", update_types=[Add], config=config
    )
    sync.initialize(0)
    sync.update_state(lambda state: [Add(1)])
    private_redis.stop()
    done: list[Any] = []
    appender = threading.Thread(target=lambda: done.append(sync.update_state(lambda s: [Add(2)])))
    appender.start()
    retried = waiting_for(
        records, "statesync.synchronizer", logging.WARNING, "'counter'", "retry 1"
    )
    wait_until(retried, what="the first retry logged")
    private_redis.start()
    appender.join(60)
    assert done == [None] and sync.state == 3
    [warning] = retried()
    assert warning.exc_info is not None and isinstance(warning.exc_info[1], BackendUnavailableError)
    assert str(warning.exc_info[1]) in warning.getMessage()
    backend.close()


def test_a_writer_retrying_through_an_outage_logs_a_warning_with_the_exception(
    private_redis: LocalRedisServer, records: Any
) -> None:
    url = private_redis.url
    with StreamManager.from_url(url) as sm:
        sm.create_scope("w")
        sm.create_stream("w", "orders")
    retrying = waiting_for(
        records, "readergroup.client.writer", logging.WARNING, "w/orders", "retrying"
    )
    with (
        EventStreamClientFactory.from_url("w", url) as factory,
        factory.create_event_writer("orders", UTF8StringSerializer()) as writer,
    ):
        writer.write_event("before").result(10)
        private_redis.stop()
        during = writer.write_event("during")
        wait_until(retrying, what="the writer's retry logged")
        private_redis.start()
        during.result(60)
    [warning] = retrying()
    assert warning.exc_info is not None and str(warning.exc_info[1]) in warning.getMessage()


def test_the_cli_verbose_flag_logs_to_stderr_and_leaves_the_output_alone(
    redis_url: str, scope: str
) -> None:
    done = cli(redis_url, "-v", "--json", "stream", "create", f"{scope}/orders")
    assert f"INFO readergroup.admin.stream_manager: created stream {scope}/orders" in done.stderr
    assert done.stdout.startswith("{") and "INFO" not in done.stdout
    quiet = cli(redis_url, "--json", "group", "create", f"{scope}/g", "--stream", f"{scope}/orders")
    assert quiet.stderr == ""
    debug = cli(redis_url, "-vv", "group", "delete", f"{scope}/g")
    assert f"INFO readergroup.admin.group_manager: deleted reader group {scope}/g" in debug.stderr


def test_a_failing_write_callback_logs_a_warning_and_the_writer_carries_on(
    redis_url: str, scope: str, factory: EventStreamClientFactory, records: Any
) -> None:
    stream_and_group(redis_url, scope)

    def broken(future: Any) -> None:
        raise RuntimeError("callback bug")

    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        first = writer.write_event("one")
        first.add_done_callback(broken)
        first.result(10)
        callback = waiting_for(
            records, "readergroup.client.writer", logging.WARNING, "callback", "callback bug"
        )
        wait_until(callback, what="the callback's error logged")
        assert writer.write_event("two").result(10) is not None  # the sender lives on
    [warning] = callback()
    assert warning.exc_info is not None and isinstance(warning.exc_info[1], RuntimeError)


def test_a_runner_commit_refused_by_fencing_logs_a_warning_instead_of_vanishing(
    redis_url: str, scope: str, factory: EventStreamClientFactory, records: Any
) -> None:
    stream_and_group(redis_url, scope, **FAST)
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        writer.write_event("one", routing_key="k").result(10)
    reader = factory.create_reader("fenced", "billing", UTF8StringSerializer())
    event = reader.read_next_event(timeout=2)
    assert event.event == "one" and event.offset is not None
    runner = _Runner(reader, lambda e: None, None, 16)
    runner.processed[(event.stream or "", event.segment or 0)] = event.offset + 1
    group = ReaderGroupManager.from_url(scope, redis_url).get_reader_group("billing")
    assert group.reader_offline("fenced") is True
    runner.commit()  # refused (fenced): logged, not raised, the run goes on to rejoin
    [dropped] = logged(records, "readergroup.client.runner", logging.WARNING, "commit dropped")
    assert "'fenced'" in dropped.getMessage() and runner.stats.commits == 0
    reader.close()


@dataclass(frozen=True)
class Append(Update):
    text: str

    def apply_to(self, state: Any) -> Any:
        return state + self.text


def test_a_failed_automatic_compaction_logs_a_warning(
    backend: Any, unique_name: str, records: Any
) -> None:
    # the empty state's snapshot fits, the one after ten appends does not: compaction fails
    config = SyncConfig(compact_every=10, max_snapshot_bytes=200)
    sync: StateSynchronizer[str] = StateSynchronizer(
        backend, unique_name, update_types=[Append], config=config
    )
    sync.initialize("")
    for _ in range(10):
        sync.update_state(lambda state: [Append("x" * 100)])
    assert len(sync.state) == 1000  # the appends landed; only the compaction failed
    [failed] = logged(records, "statesync.synchronizer", logging.WARNING, "compaction", "failed")
    assert failed.exc_info is not None and unique_name in failed.getMessage()


def test_a_group_retention_cannot_read_logs_a_warning_and_keeps_everything(
    redis_url: str, scope: str, records: Any
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(
            scope, "orders", StreamConfiguration(retention=RetentionPolicy(consumption_based=True))
        )
        with ReaderGroupManager.from_url(scope, redis_url) as rgm:
            rgm.create_reader_group("billing", ReaderGroupConfig(streams=[f"{scope}/orders"]))
        # a rogue client's bytes in the group's log: the group cannot be read any more
        sm.connection.log_backend.append(
            group_sync_name(scope, "billing"),
            b"\xc1 not msgpack",
            expected_revision=None,
            writer="rogue",
            sequence=1,
            max_bytes=1 << 20,
        )
        cuts = RetentionManager(sm).subscriber_cuts(scope, "orders")
    assert cuts == {f"group:{scope}/billing": None}  # unreadable: nothing it may need goes
    [warning] = logged(
        records, "readergroup.admin.retention", logging.WARNING, f"group {scope}/billing"
    )
    assert warning.exc_info is not None
