"""The asyncio managers (issue 29): scopes, streams, groups, checkpoints, resets and lag
awaited, never blocking the event loop.

The behaviour tests run each body on the threaded managers and on the asyncio ones behind a
blocking adapter (``flavour``, :mod:`tests.support.async_managers`), on both backends
(``connection``: memory and a real Redis): both run the same procedures
(:mod:`readergroup.admin.stream_steps`, :mod:`readergroup.admin.group_steps`), so they must
give the same results, errors and effects; threaded clients see what the asyncio managers do
through the shared memory or Redis."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from readergroup import (
    CheckpointError,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupInUseError,
    ReaderGroupManager,
    ReaderGroupNotFoundError,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCut,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.aio import AsyncEventStreamClientFactory
from readergroup.core.errors import (
    ScopeNotEmptyError,
    StreamNotFoundError,
    StreamNotSealedError,
)
from readergroup.storage.connection_api import Connection
from readergroup.testing.memory_connection import MemoryConnection
from tests.support.async_managers import FLAVOURS, make_managers, retention_of
from tests.support.connections import new_scope, scoped_factory
from tests.support.waiting import wait_until
from tests.test_aio_writer import async_view
from tests.test_checkpoints import FAST, Reading, write

FOUR = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(4))


@pytest.fixture
def scope(connection: Connection) -> str:
    return new_scope(connection)


@pytest.fixture
def factory(connection: Connection, scope: str) -> Iterator[EventStreamClientFactory]:
    yield from scoped_factory(connection, scope)


def _url(connection: Connection, request: pytest.FixtureRequest) -> str | None:
    if isinstance(connection, MemoryConnection):
        return None
    url: str = request.getfixturevalue("redis_url")
    return url


@pytest.fixture(params=FLAVOURS)
def managers(
    request: pytest.FixtureRequest, connection: Connection, scope: str
) -> Iterator[tuple[Any, Any]]:
    """``(stream manager, group manager of scope)``: threaded, or asyncio behind the adapter."""
    closers: list[Callable[[], None]] = []
    try:
        yield make_managers(request.param, connection, scope, _url(connection, request), closers)
    finally:
        while closers:
            closers.pop()()


# -- the same behaviour, threaded and asyncio, on both backends ------------------------------
def test_scopes_and_streams_from_creation_to_deletion(
    managers: tuple[Any, Any], connection: Connection, scope: str
) -> None:
    sm, _ = managers
    assert sm.create_scope(scope) is False  # (made by the fixture)
    assert sm.create_stream(scope, "s", FOUR) is True
    assert sm.create_stream(scope, "s") is False
    assert sm.list_streams(scope) == ["s"]
    info = sm.get_stream_info(scope, "s")
    assert len(info.active_segments) == 4 and info.epoch == 0 and not info.sealed
    first = min(info.active_segments, key=lambda s: s.low)
    middle = (first.low + first.high) / 2
    created = sm.scale_stream(
        scope, "s", [first.segment_id], [(first.low, middle), (middle, first.high)]
    )
    threaded = StreamManager(connection)
    assert len(created) == 2 and threaded.get_stream_info(scope, "s").epoch == 1
    assert all(s.sealed for s in threaded.segment_states(scope, "s", [first.segment_id]).values())
    with pytest.raises(StreamNotSealedError):
        sm.delete_stream(scope, "s")
    with pytest.raises(ScopeNotEmptyError):
        sm.delete_scope(scope)
    assert sm.seal_stream(scope, "s") is True
    assert sm.seal_stream(scope, "s") is False
    assert threaded.get_stream_info(scope, "s").sealed
    assert sm.delete_stream(scope, "s") is True
    assert sm.delete_stream(scope, "s") is False
    with pytest.raises(StreamNotFoundError):
        sm.stream_state(scope, "s")
    with pytest.raises(StreamNotFoundError):
        threaded.stream_state(scope, "s")


def test_time_cuts_truncation_and_the_head_move_the_same_way(
    managers: tuple[Any, Any], connection: Connection, scope: str, factory: Any
) -> None:
    sm, _ = managers
    sm.create_stream(scope, "s", FOUR)
    write(factory, 40, "a")
    threaded = StreamManager(connection)
    wait_until(lambda: threaded.connection.server_time_ms() > _newest_ms(factory), 5)
    middle = threaded.connection.server_time_ms()
    write(factory, 40, "b")
    cut = sm.cut_at_time(scope, "s", middle)
    assert cut == threaded.cut_at_time(scope, "s", middle)
    sm.truncate_stream(scope, "s", cut)
    assert sm.head_cut(scope, "s") == cut == threaded.head_cut(scope, "s")
    left = [e.payload for e in factory.create_batch_client().read_events("s")]
    assert sorted(left) == sorted(f"b{i}".encode() for i in range(40))
    assert sm.tail_cut(scope, "s") == threaded.tail_cut(scope, "s")


def _newest_ms(factory: Any) -> int:
    return max(e.server_ms for e in factory.create_batch_client().read_events("s"))


def test_groups_checkpoints_resets_lag_and_deletion(
    managers: tuple[Any, Any], connection: Connection, scope: str, factory: Any
) -> None:
    """A group made by the manager under test, read by threaded readers: a checkpoint each
    reader hands out, a reset to it that the readers follow, lag, and a deletion refused
    while readers are online."""
    sm, rgm = managers
    sm.create_stream(scope, "s", FOUR)
    write(factory, 40)
    config = ReaderGroupConfig(streams=[f"{scope}/s"], auto_commit_interval=0.1, **FAST)
    assert rgm.create_reader_group("g", config) is True
    assert rgm.create_reader_group("g", config) is False
    assert rgm.list_reader_groups() == ["g"]
    group = rgm.get_reader_group("g")
    readers = [Reading(factory, "r1"), Reading(factory, "r2")]
    try:
        wait_until(lambda: sum(len(r.records) for r in readers) == 40, 20)
        checkpoint = group.initiate_checkpoint("cp-1", timeout=20)
        assert all(r.checkpoints == ["cp-1"] for r in readers)
        assert sum(checkpoint.positions.values()) == 40
        wait_until(lambda: group.get_metrics().total.events == 0, 20)  # (as readers commit)
        assert sorted(group.get_online_readers()) == ["r1", "r2"]
        with pytest.raises(ReaderGroupInUseError):
            rgm.delete_reader_group("g")
        starts = group.reset_reader_group("head", timeout=20)
        assert set(starts.values()) == {0}
        wait_until(lambda: sum(len(r.records) for r in readers) == 80, 20)
        assert {s.stream for s in group.get_metrics().segments} == {f"{scope}/s"}
        back_at = checkpoint.stream_cuts[f"{scope}/s"]
        wait_until(lambda: group.get_stream_cuts()[f"{scope}/s"] == back_at, 20)
    finally:
        for r in readers:
            r.close()
    assert rgm.delete_reader_group("g", force=True) is True
    with pytest.raises(ReaderGroupNotFoundError):
        rgm.get_reader_group("g")


def test_a_checkpoint_nobody_acknowledges_fails_and_can_declare_readers_offline(
    managers: tuple[Any, Any], connection: Connection, scope: str, factory: Any
) -> None:
    sm, rgm = managers
    sm.create_stream(scope, "s", FOUR)
    rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **FAST))
    group = rgm.get_reader_group("g")
    silent = factory.create_reader("mute", "g", UTF8StringSerializer())  # joins, never reads
    try:
        with pytest.raises(CheckpointError) as failed:
            group.initiate_checkpoint("cp", timeout=0.3, declare_offline=True)
        assert "mute" in str(failed.value)
        assert group.get_online_readers() == []
    finally:
        silent.close()


def test_retention_keeps_what_groups_and_subscribers_need_and_truncates_the_rest(
    managers: tuple[Any, Any], connection: Connection, scope: str, factory: Any
) -> None:
    sm, rgm = managers
    retention = retention_of(sm)
    policy = RetentionPolicy(consumption_based=True)
    sm.create_stream(scope, "r", StreamConfiguration(retention=policy))
    write(factory, 100, stream="r")
    config = ReaderGroupConfig(streams=[f"{scope}/r"], commit_mode="manual", **FAST)
    rgm.create_reader_group("slow", config)
    assert retention.apply(scope, "r") is None  # the group has read nothing yet
    with factory.create_reader("x", "slow", UTF8StringSerializer()) as reader:
        for _ in range(40):
            reader.read_next_event(timeout=2)
        reader.commit()
    cut = retention.apply(scope, "r")
    assert cut == StreamCut(scope, "r", {0: 40}) == sm.get_stream_info(scope, "r").head_cut
    retention.publish(scope, "r", "spark-query", StreamCut(scope, "r", {0: 40}))
    assert retention.subscriber_cuts(scope, "r")["external:spark-query"] == cut
    with factory.create_reader("x", "slow", UTF8StringSerializer()) as reader:
        while reader.read_next_event(timeout=0.3).event is not None:
            pass
        reader.commit()
    assert retention.apply(scope, "r") is None  # the external subscriber holds it back
    retention.unsubscribe(scope, "r", "spark-query")
    assert retention.truncation_cut(scope, "r") == StreamCut(scope, "r", {0: 100})
    assert retention.apply(scope, "r") == StreamCut(scope, "r", {0: 100})


# -- the event loop stays free -----------------------------------------------------------------
class LoopProbe:
    """A task rescheduling itself every 1 ms, recording how late each wake-up was."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + 0.001
            await asyncio.sleep(0.001)
            self.lags.append(loop.time() - due)

    def __enter__(self) -> LoopProbe:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._task is not None
        self._task.cancel()


@pytest.mark.parametrize("connection", ["redis"], indirect=True)
def test_the_managers_never_block_the_loop(
    connection: Connection, scope: str, factory: Any, redis_url: str
) -> None:
    """While an asyncio group manager awaits a checkpoint no reader acknowledges (its waits
    are on the group's log) and a stream manager works on Redis, a 1 ms probe task keeps
    running: its worst lateness stays far below the checkpoint's timeout. The same probe
    around the threaded manager's checkpoint is late by most of that timeout (the control:
    the probe does see a blocked loop)."""
    StreamManager(connection).create_stream(scope, "s", FOUR)
    config = ReaderGroupConfig(streams=[f"{scope}/s"], **FAST)
    ReaderGroupManager(scope, connection).create_reader_group("g", config)
    mute = factory.create_reader("mute", "g", UTF8StringSerializer())
    timeout = 1.5

    async def asyncio_managers() -> tuple[list[float], int]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as made:
            group = await made.reader_group_manager().get_reader_group("g")
            sm = made.stream_manager()
            with LoopProbe() as probe:
                checkpoint = asyncio.create_task(group.initiate_checkpoint("cp", timeout))
                streams = 0
                while not checkpoint.done():
                    await sm.get_stream_info(scope, "s")
                    streams += 1
                with pytest.raises(CheckpointError):
                    await checkpoint
            return probe.lags, streams

    async def threaded_manager() -> list[float]:
        group = ReaderGroupManager(scope, connection).get_reader_group("g")
        with LoopProbe() as probe:
            await asyncio.sleep(0.01)
            with pytest.raises(CheckpointError):
                group.initiate_checkpoint("cp-blocking", timeout)  # blocks the loop
            await asyncio.sleep(0.01)
        return probe.lags

    try:
        lags, infos = asyncio.run(asyncio_managers())
        control = asyncio.run(threaded_manager())
    finally:
        mute.close()
    assert infos > 1 and len(lags) > 50
    assert max(lags) < timeout / 3, f"the loop was held {max(lags):.3f}s"
    assert max(control) > timeout / 2  # the probe notices a blocked loop


# -- a stream shared by asyncio and threaded clients -------------------------------------------
def test_a_stream_made_and_scaled_by_asyncio_managers_while_both_writers_write(
    connection: Connection, scope: str, factory: Any, request: pytest.FixtureRequest
) -> None:
    """The asyncio stream manager creates the stream; a threaded writer (in a thread) and the
    asyncio writer (on the loop) write until the asyncio manager has split a segment and
    merged the halves again: every event is stored once, in write order per key, and the
    successors took writes."""
    keys = 32

    async def main() -> tuple[list[int], int, int]:
        view = async_view(connection, request)
        async with AsyncEventStreamClientFactory(scope, view, owns_connection=True) as made:
            assert await made.create_stream("s", FOUR) is True
            sm = made.stream_manager()
            writer = await made.create_event_writer("s", UTF8StringSerializer())
            scaled = threading.Event()
            written = [0, 0]

            def threaded_writes() -> None:
                with factory.create_event_writer("s", UTF8StringSerializer()) as threaded:
                    i = 0
                    while not scaled.is_set() or i < 200:
                        threaded.write_event(f"t{i}", routing_key=f"t{i % keys}")
                        i += 1
                        if i % 20 == 0:
                            scaled.wait(0.001)  # (pacing: about as many as the asyncio writer)
                    written[0] = i

            async def asyncio_writes() -> None:
                i = 0
                while not scaled.is_set() or i < 200:
                    await writer.send(f"a{i}", routing_key=f"a{i % keys}")
                    i += 1
                    if i % 20 == 0:
                        await asyncio.sleep(0.001)
                await writer.flush()
                written[1] = i

            writes = [
                asyncio.create_task(asyncio.to_thread(threaded_writes)),
                asyncio.create_task(asyncio_writes()),
            ]
            await asyncio.sleep(0.05)
            info = await sm.get_stream_info(scope, "s")
            first = min(info.active_segments, key=lambda s: s.low)
            middle = (first.low + first.high) / 2
            halves = [(first.low, middle), (middle, first.high)]
            created = await sm.scale_stream(scope, "s", [first.segment_id], halves)
            await written_to(sm, created)
            merged = await sm.scale_stream(scope, "s", created, [(first.low, first.high)])
            await written_to(sm, merged)
            scaled.set()
            await asyncio.gather(*writes)
            return [*created, *merged], written[0], written[1]

    async def written_to(sm: Any, segments: list[int]) -> None:
        """Until each of ``segments`` took events (polled on the manager, with a deadline)."""
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            states = await sm.segment_states(scope, "s", segments)
            if all(state.tail > 0 for state in states.values()):
                return
            assert asyncio.get_running_loop().time() < deadline, "no writes reached the successors"
            await asyncio.sleep(0.01)

    scaled, threaded, awaited = asyncio.run(main())
    events = list(factory.create_batch_client().read_events("s"))
    payloads = [e.payload.decode() for e in events]
    expected = [f"t{i}" for i in range(threaded)] + [f"a{i}" for i in range(awaited)]
    assert sorted(payloads) == sorted(expected)  # nothing lost, nothing twice
    by_key: dict[str | None, list[int]] = {}
    for event in events:
        by_key.setdefault(event.routing_key, []).append(int(event.payload[1:]))
    for numbers in by_key.values():
        assert numbers == sorted(numbers)
    assert set(scaled) <= {e.segment for e in events}


def samples(families: Any) -> dict[tuple[str, tuple[str, ...]], float]:
    """Every sample of a collect, by name and label values (the scrape's duration left out)."""
    return {
        (s.name, tuple(s.labels.values())): s.value
        for family in families
        for s in family.samples
        if s.name != "readergroup_scrape_duration_seconds"
    }


def test_the_asyncio_metrics_collector_reads_what_the_threaded_one_reads(
    connection: Connection, scope: str, factory: Any, request: pytest.FixtureRequest
) -> None:
    """``factory.metrics_collector()``: after ``await refresh()`` its ``collect`` gives the
    threaded ReaderGroupCollector's samples (positions, tails, lag, readers, checkpoints, the
    streams' unfinished transactions on Redis), and reads nothing by itself."""
    from readergroup.admin.metrics import ReaderGroupCollector

    StreamManager(connection).create_stream(scope, "s", FOUR)
    write(factory, 30)
    config = ReaderGroupConfig(streams=[f"{scope}/s"], auto_commit_interval=0.1, **FAST)
    ReaderGroupManager(scope, connection).create_reader_group("g", config)
    reading = Reading(factory, "r1")
    try:
        wait_until(lambda: len(reading.records) == 30, 20)
        group = ReaderGroupManager(scope, connection).get_reader_group("g")
        group.initiate_checkpoint("cp", timeout=20)
        wait_until(lambda: group.get_metrics().total.events == 0, 20)
    finally:
        reading.close()
    threaded = samples(ReaderGroupCollector(connection, [scope]).collect())  # type: ignore[arg-type]

    async def main() -> tuple[Any, Any]:
        view = async_view(connection, request)
        async with AsyncEventStreamClientFactory(scope, view, owns_connection=True) as made:
            collector = made.metrics_collector()
            before = samples(collector.collect())
            await collector.refresh()
            return before, samples(collector.collect())

    before, refreshed = asyncio.run(main())
    assert before == {}
    assert refreshed == threaded
    assert refreshed[("readergroup_group_checkpoints", (scope, "g", "completed"))] == 1
    assert refreshed[("readergroup_up", ())] == 1


def test_cancelling_an_awaited_checkpoint_leaves_it_requested_and_the_manager_usable(
    connection: Connection, scope: str, factory: Any, request: pytest.FixtureRequest
) -> None:
    """A task awaiting a checkpoint is cancelled while the group's reader is paused: the
    cancellation ends the wait at once, the checkpoint stays requested, the same handle keeps
    working, and once the reader reads again the checkpoint completes."""
    StreamManager(connection).create_stream(scope, "s", FOUR)
    config = ReaderGroupConfig(streams=[f"{scope}/s"], **FAST)
    ReaderGroupManager(scope, connection).create_reader_group("g", config)
    reading = Reading(factory, "r1")

    async def main() -> tuple[Any, Any]:
        view = async_view(connection, request)
        async with AsyncEventStreamClientFactory(scope, view, owns_connection=True) as made:
            group = await made.reader_group_manager().get_reader_group("g")
            while await group.get_online_readers() != ["r1"]:
                await asyncio.sleep(0.01)
            reading.paused.set()
            await asyncio.sleep(0.2)  # (the reader's current read returns)
            waiting = asyncio.create_task(group.initiate_checkpoint("cp", timeout=30))
            while (await group.refresh()).checkpoint("cp") is None:
                await asyncio.sleep(0.01)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            pending = (await group.refresh()).checkpoint("cp")
            reading.paused.clear()
            while (done := (await group.refresh()).checkpoint("cp")).completed_ms < 0:
                await asyncio.sleep(0.01)
            return pending, done

    try:
        pending, done = asyncio.run(asyncio.wait_for(main(), 30))  # (the polls' deadline)
    finally:
        reading.close()
    assert pending.completed_ms < 0 and not pending.failed
    assert done.completed_ms >= 0 and reading.checkpoints == ["cp"]


def test_an_asyncio_group_watch_awaits_coroutine_listeners_as_segments_change(
    connection: Connection, scope: str, factory: Any, request: pytest.FixtureRequest
) -> None:
    """``group.watch(listener)`` (a task of the loop, waiting on the group's log) awaits a
    coroutine listener with the number of segments the group reads: 4 at first, 5 once a
    reader finished the segment a split sealed (its two successors came in); a listener that
    raises once is logged and the watch goes on."""
    manager = StreamManager(connection)
    manager.create_stream(scope, "s", FOUR)
    config = ReaderGroupConfig(streams=[f"{scope}/s"], **FAST)
    ReaderGroupManager(scope, connection).create_reader_group("g", config)
    counts: list[int] = []

    async def heard(count: int) -> None:
        await asyncio.sleep(0)
        counts.append(count)
        if len(counts) == 1:
            raise RuntimeError("a listener's bug")

    async def main() -> None:
        view = async_view(connection, request)
        async with AsyncEventStreamClientFactory(scope, view, owns_connection=True) as made:
            group = await made.reader_group_manager().get_reader_group("g")
            watcher = group.watch(heard)
            while 4 not in counts:
                await asyncio.sleep(0.01)
            info = manager.get_stream_info(scope, "s")
            first = min(info.active_segments, key=lambda s: s.low)
            middle = (first.low + first.high) / 2
            halves = [(first.low, middle), (middle, first.high)]
            await asyncio.to_thread(manager.scale_stream, scope, "s", [first.segment_id], halves)
            reading = await asyncio.to_thread(Reading, factory, "r1")
            try:
                while 5 not in counts:
                    await asyncio.sleep(0.01)
            finally:
                await asyncio.to_thread(reading.close)
                await watcher.stop()

    asyncio.run(asyncio.wait_for(main(), 30))  # (the polls' deadline)
    assert counts[0] == 4 and counts[-1] == 5


def test_a_cancellation_a_step_swallowed_still_ends_the_procedure() -> None:
    """Python 3.11's ``asyncio.wait_for`` returns the result instead of raising when a
    wake-up races the cancellation (the task stays "cancelling"): the driver notices after
    that step and ends the procedure, so a cancelled checkpoint or watch never runs on."""
    from readergroup.core.calls import Steps, call_on
    from readergroup.storage.aio_calls import drive_async

    class Swallowing:
        async def wait(self) -> str:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                return "woken"  # the wake-up won the race
            return "timed out"

    steps: list[str] = []

    def forever() -> Steps[None]:
        while True:
            steps.append((yield call_on(Swallowing(), "wait")))

    async def main() -> None:
        task = asyncio.create_task(drive_async(forever()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)

    asyncio.run(main())
    assert steps == []  # ended right after the step that swallowed it


def test_steps_started_in_a_task_being_cancelled_run_to_their_end() -> None:
    """Cleanup on the way out of a cancelled task (a reader's close leaving the group) runs
    steps while the task is still ``cancelling()``: only a cancellation that arrives during a
    call ends them, not the one being handled."""
    from readergroup.core.calls import Steps, call_on
    from readergroup.storage.aio_calls import drive_async

    class Io:
        async def step(self, n: int) -> int:
            await asyncio.sleep(0)
            return n

    def cleanup() -> Steps[list[int]]:
        done: list[int] = []
        for n in range(3):
            done.append((yield call_on(Io(), "step", n)))
        return done

    async def service() -> list[int]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return await drive_async(cleanup())
        return []

    async def main() -> list[int]:
        task = asyncio.create_task(service())
        await asyncio.sleep(0.01)
        task.cancel()
        return await asyncio.wait_for(task, 5)

    assert asyncio.run(main()) == [0, 1, 2]
