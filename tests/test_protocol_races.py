"""Protocol races of issue 11, each reproduced on a real Redis: checkpoints that leave segments
out, successors before every predecessor, close mid-checkpoint, zombie heartbeats, resets while
a commit is due, reader_offline on a stale handle, stream cuts while a merge waits."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    RetentionManager,
    RetentionPolicy,
    ScalingPolicy,
    SegmentNotOwnedError,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin.group_manager import ReaderGroup, join_group
from readergroup.admin.group_member import GroupMember
from readergroup.core.group_state import CreateCheckpoint, GroupState
from readergroup.core.routing import key_position
from readergroup.storage.connection import RedisConnection
from tests.support.async_reader_adapter import (
    flavoured_factory,
    flavoured_on_redis,
    reader_flavour_fixture,  # noqa: F401 (a fixture)
)
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 1.5, "group_refresh_time": 0.05}


@pytest.fixture
def connection(redis_url: str) -> Iterator[RedisConnection]:
    conn = RedisConnection.from_url(redis_url)
    yield conn
    conn.close()


@pytest.fixture
def factory(
    connection: RedisConnection, scope: str, reader_flavour: str, request: pytest.FixtureRequest
) -> Iterator[EventStreamClientFactory]:
    """Threaded readers, or asyncio ones (a flavoured test's ``reader_flavour``)."""
    yield from flavoured_factory(connection, scope, reader_flavour, request)


def make_stream(redis_url: str, scope: str, segments: int, name: str = "s", **kw: Any) -> str:
    with StreamManager.from_url(redis_url) as sm:
        config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments), **kw)
        sm.create_stream(scope, name, config)
    return f"{scope}/{name}"


def make_group(redis_url: str, scope: str, name: str = "g", stream: str = "s", **kw: Any) -> Any:
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group(name, ReaderGroupConfig(streams=[f"{scope}/{stream}"], **kw))
        return rgm.get_reader_group(name)


def keys_in(low: float, high: float, count: int) -> list[str]:
    """``count`` routing keys whose hash falls in ``[low, high)``."""
    found: list[str] = []
    i = 0
    while len(found) < count:
        key = f"k{i}"
        if low <= key_position(key) < high:
            found.append(key)
        i += 1
    return found


def write_keys(factory: EventStreamClientFactory, keys: list[str], per_key: int, tag: str) -> None:
    with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
        for i in range(per_key):
            for key in keys:
                writer.write_event(f"{tag}:{key}:{i}", routing_key=key)


def race_before_first_append(member: GroupMember, rival: Callable[[], Any]) -> None:
    """Make ``rival`` land right before ``member``'s next conditional append (a real append
    conflict on Redis: the member's generator then re-runs on the newer state)."""
    original = member.sync.update_state

    def update_state(generator: Callable[[GroupState], Any], **options: Any) -> Any:
        member.sync.update_state = original  # type: ignore[method-assign]
        rival()
        return original(generator, **options)

    member.sync.update_state = update_state  # type: ignore[method-assign]


def create_checkpoint(group: ReaderGroup, name: str) -> Callable[[], Any]:
    return lambda: group.sync.update_state(lambda s: [CreateCheckpoint(name, 0)])


# -- item 1 -----------------------------------------------------------------------------------
def test_a_checkpoint_raced_by_a_release_still_covers_every_segment(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    stream = make_stream(redis_url, scope, 4)
    group = make_group(redis_url, scope, **FAST)
    r1, _ = join_group(connection, scope, "g", "r1")
    r1.rebalance({})
    assert len(r1.refresh().owned_by("r1")) == 4
    x1, _ = join_group(connection, scope, "g", "x1")
    # r1 must give two segments to x1, but a checkpoint lands right before its release
    race_before_first_append(r1, create_checkpoint(group, "cp"))
    acquired, released = r1.rebalance({})
    assert acquired == {} and released == [], "moved segments while a checkpoint awaited it"
    assert len(r1.refresh().owned_by("r1")) == 4
    r1.ack_checkpoint("cp", {k: a.position for k, a in r1.state.owned_by("r1").items()})
    x1.ack_checkpoint("cp", {})
    checkpoint = group.refresh().checkpoint("cp")
    assert checkpoint is not None and checkpoint.completed_ms >= 0
    assert sorted(checkpoint.positions) == [(stream, s) for s in range(4)]


def test_a_checkpoint_raced_by_a_completion_still_covers_every_segment(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    stream = make_stream(redis_url, scope, 1)
    group = make_group(redis_url, scope, **FAST)
    with StreamManager.from_url(redis_url) as sm:
        successors = sm.scale_stream(scope, "s", [0], [(0.0, 0.5), (0.5, 1.0)])
    r1, _ = join_group(connection, scope, "g", "r1")
    r1.rebalance({})
    token = r1.state.assigned[(stream, 0)].token
    race_before_first_append(r1, create_checkpoint(group, "cp"))
    follow = tuple(((stream, s), ((stream, 0),), 0) for s in successors)
    r1.complete((stream, 0), token, follow)
    assert (stream, 0) in r1.refresh().assigned, "completed while a checkpoint awaited it"
    r1.ack_checkpoint("cp", {(stream, 0): 0})
    checkpoint = group.refresh().checkpoint("cp")
    assert checkpoint is not None and dict(checkpoint.positions) == {(stream, 0): 0}


# -- item 2 -----------------------------------------------------------------------------------
def test_per_key_order_holds_across_a_split_followed_by_a_merge(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope, 2)
    make_group(redis_url, scope, **FAST)
    low, high = keys_in(0.0, 0.5, 8), keys_in(0.5, 1.0, 2)
    write_keys(factory, low, 40, "a")  # segment 0 is long
    write_keys(factory, high, 2, "a")  # segment 1 is short: it completes first
    with StreamManager.from_url(redis_url) as sm:
        split = sm.scale_stream(scope, "s", [0], [(0.0, 0.25), (0.25, 0.5)])
        write_keys(factory, low + high, 2, "b")
        sm.scale_stream(scope, "s", [split[1], 1], [(0.25, 1.0)])
        write_keys(factory, low + high, 2, "c")
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    events: list[Any] = []
    total = 40 * 8 + 2 * 2 + 4 * 10
    reads = 0
    while len(events) < total and reads < 2000:
        events += [e for e in reader.read_batch(4, timeout=0.2) if e.event is not None]
        reads += 1
        time.sleep(0.005)  # the application's processing time: segment 0 takes a while
    reader.close()
    assert len(events) == total
    seen: dict[str, list[str]] = defaultdict(list)
    for event in events:
        seen[event.routing_key].append(event.event)
    for key, values in seen.items():
        order = [(v.split(":")[0], int(v.split(":")[2])) for v in values]
        assert order == sorted(order), f"{key} out of order: {values}"


# -- item 3 -----------------------------------------------------------------------------------
@flavoured_on_redis("sync", "async")
def test_close_mid_checkpoint_records_what_was_handed_out(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    stream = make_stream(redis_url, scope, 1)
    group = make_group(redis_url, scope, commit_mode="manual", **FAST)
    write_keys(factory, ["k"], 10, "a")
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    got: list[Any] = []
    wait_until(lambda: got.extend(reader.read_batch(10, timeout=0.1)) or len(got) == 10)
    reader.commit({(stream, 0): 4})
    results: list[Any] = []
    taker = threading.Thread(target=lambda: results.append(group.initiate_checkpoint("cp", 20)))
    taker.start()
    wait_until(lambda: reader.read_next_event(timeout=0.1).is_checkpoint, what="checkpoint")
    reader.close()
    taker.join(30)
    assert results and results[0].positions == {(stream, 0): 10}


# -- item 4 -----------------------------------------------------------------------------------
def test_a_zombie_cannot_evict_its_healthy_replacement(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    make_stream(redis_url, scope, 2)
    group = make_group(redis_url, scope, heartbeat_interval=0.2, session_timeout=1.0)
    observer, _ = join_group(connection, scope, "g", "observer")
    zombie, _ = join_group(connection, scope, "g", "worker")
    group.refresh()
    assert group.reader_offline("worker")  # the zombie was stopped and declared offline
    replacement, _ = join_group(connection, scope, "g", "worker")
    joined = replacement.server_ms

    def join_time_is_old() -> bool:
        observer.heartbeat()
        replacement.heartbeat()  # healthy: it beats on time
        return connection.server_time_ms() > joined + 1_200

    wait_until(join_time_is_old, what="the replacement's join time is older than the session")
    zombie.heartbeat()  # the zombie resumes: its stale generation must not overwrite
    zombie.leave()  # nor may its leave delete the replacement's heartbeat
    liveness = observer.heartbeat(judge=True)
    assert "worker" not in liveness.removed
    assert replacement.generation == group.refresh().readers["worker"].generation


# -- item 5 -----------------------------------------------------------------------------------
@flavoured_on_redis("sync", "async")
def test_a_reset_while_a_commit_is_due_is_absorbed(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    make_stream(redis_url, scope, 2)
    group = make_group(redis_url, scope, auto_commit_interval=0.01, **FAST)
    write_keys(factory, keys_in(0, 1, 4), 5, "a")
    reader = factory.create_reader("r", "g", UTF8StringSerializer())
    got: list[Any] = []
    wait_until(lambda: got.extend(reader.read_batch(5, timeout=0.1)) or len(got) >= 5)
    generation = group.refresh().generation
    offline: list[Any] = []
    resetter = threading.Thread(
        target=lambda: offline.append(group.reset_reader_group(start="head", timeout=20))
    )
    resetter.start()
    wait_until(lambda: group.refresh().generation > generation, what="the reset")
    try:
        wait_until(lambda: not resetter.is_alive() or bool(reader.read_batch(5, timeout=0.05)))
    except SegmentNotOwnedError as exc:
        pytest.fail(f"the reader wedged on a commit for the old generation: {exc}")
    resetter.join(30)
    assert group.get_online_readers() == ["r"]  # acknowledged, not declared offline
    reader.close()


# -- item 6 -----------------------------------------------------------------------------------
def test_reader_offline_on_a_stale_handle_decides_on_fresh_state(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    stream = make_stream(redis_url, scope, 2)
    make_group(redis_url, scope, **FAST)
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        stale = rgm.get_reader_group("g")  # taken before anybody joined
        r1, _ = join_group(connection, scope, "g", "reader1")
        r1.rebalance({})
        r2, _ = join_group(connection, scope, "g", "reader2")
        r2.heartbeat()
        assert stale.reader_offline("reader1") is True
        r2.rebalance({})
        assert sorted(r2.state.owned_by("reader2")) == [(stream, 0), (stream, 1)]
        assert stale.reader_offline("nobody") is False
        beats = stale.heartbeats.beat("", 0)[1]
        assert "reader2" in beats and "reader1" not in beats


# -- item 7 -----------------------------------------------------------------------------------
def test_stream_cuts_while_a_merge_waits_cover_the_key_space(
    redis_url: str, scope: str, connection: RedisConnection, factory: EventStreamClientFactory
) -> None:
    stream = make_stream(redis_url, scope, 2, retention=RetentionPolicy())
    group = make_group(redis_url, scope, **FAST)
    write_keys(factory, keys_in(0, 1, 8), 3, "a")
    fast = factory.create_reader("fast", "g", UTF8StringSerializer())
    wait_until(lambda: fast.read_batch(5, timeout=0.05) is not None and fast.owned_segments())
    slow, _ = join_group(connection, scope, "g", "slow")

    def balanced() -> bool:
        fast.read_batch(5, timeout=0.05)
        slow.rebalance({})
        return len(slow.state.owned_by("slow")) == 1 and len(fast.owned_segments()) == 1

    wait_until(balanced, what="one segment each")
    (held,) = slow.state.owned_by("slow")
    with StreamManager.from_url(redis_url) as sm:
        (merged,) = sm.scale_stream(scope, "s", [0, 1], [(0.0, 1.0)])

    def fast_done() -> bool:
        fast.read_batch(50, timeout=0.05)
        slow.heartbeat()
        return group.get_segment_distribution().completed == 1

    wait_until(fast_done, what="the fast reader completes its segment")
    assert group.get_segment_distribution().future == [(stream, merged)]
    cut = group.get_stream_cuts()[stream]
    assert set(cut.positions) == {0, 1}, cut
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("from-cut", ReaderGroupConfig(streams=[f"{scope}/s"]))
        copy = rgm.get_reader_group("from-cut")
        copy.reset_reader_group(start=cut)
    with StreamManager.from_url(redis_url) as sm:
        RetentionManager(sm).apply(scope, "s")  # must not raise InvalidStreamCutError

    results: list[Any] = []
    silent = threading.Thread(target=lambda: results.append(group.generate_stream_cuts(20)))
    silent.start()

    def acknowledged() -> bool:
        fast.read_batch(5, timeout=0.05)
        state = slow.refresh()
        for checkpoint in state.checkpoints:
            if not checkpoint.done and "slow" in checkpoint.pending:
                slow.ack_checkpoint(checkpoint.name, {held: state.assigned[held].position})
        return not silent.is_alive()

    wait_until(acknowledged, what="the silent checkpoint")
    assert set(results[0][stream].positions) == {0, 1}
    fast.close()
