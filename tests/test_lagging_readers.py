"""Lagging readers (issue 30 item 6), on a real Redis: among readers the fair shares leave tied
for a move, the one closer to the tails acquires a freed segment and the one further behind
gives a segment up (Pravega's ``calculateAcquireTime`` / ``calculateReleaseTime``). Each test
runs with the readers' ids in both orders: without lags the turns follow a hash of the id, so
the same id won either way."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import msgpack
import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin.group_manager import ReaderGroup, join_group
from readergroup.core.group_state import LAGS_WIRE_FORM, WIRE_FORM
from readergroup.core.names import group_sync_name
from readergroup.storage.connection import RedisConnection
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
    url_factory_fixture,  # noqa: F401 (a fixture)
)
from tests.support.waiting import wait_until

CONFIG: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "session_timeout": 3.0,
    "group_refresh_time": 0.1,
    "auto_commit_interval": 0.05,
    "max_poll_interval": 120.0,
}
PER_SEGMENT = 130
"""Events written per segment (about): the lagging reader reads 10 and stays ~120 behind."""
READ_BY_LAGGARD = 10

ORDERS = [("r1", "r2"), ("r2", "r1"), ("zeta", "alpha"), ("alpha", "zeta")]
"""(caught-up id, lagging id): each pair in both orders."""


@pytest.fixture
def stream(redis_url: str, scope: str) -> Iterator[Any]:
    def create(segments: int) -> None:
        with StreamManager.from_url(redis_url) as manager:
            config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
            manager.create_stream(scope, "orders", config)
        with ReaderGroupManager.from_url(scope, redis_url) as rgm:
            rgm.create_reader_group(
                "g", ReaderGroupConfig(streams=(f"{scope}/orders",), start="head", **CONFIG)
            )

    yield create


def write(factory: EventStreamClientFactory, count: int) -> None:
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i in range(count):
            writer.write_event(f"e{i}", routing_key=f"k{i % 97}")
        writer.flush()


def owned(group: ReaderGroup) -> dict[str, list[Any]]:
    return dict(group.get_segment_distribution().assigned)


def balanced(group: ReaderGroup, readers: set[str], segments: int) -> bool:
    dist = group.get_segment_distribution()
    sizes = {r: len(s) for r, s in dist.assigned.items()}
    return (
        set(sizes) == readers
        and sum(sizes.values()) == segments
        and max(sizes.values()) - min(sizes.values()) <= 1
    )


class Readers:
    """The test's readers, each driven by the test thread (a read call at a time)."""

    def __init__(self, factory: EventStreamClientFactory) -> None:
        self.factory = factory
        self.readers: dict[str, Any] = {}
        self.read: dict[str, int] = {}
        self.caught_up: set[str] = set()

    def join(self, reader_id: str) -> None:
        self.readers[reader_id] = self.factory.create_reader(reader_id, "g", UTF8StringSerializer())
        self.read[reader_id] = 0

    def step(self, *reader_ids: str) -> bool:
        """One read call of each of ``reader_ids``; True (for ``wait_until``)."""
        for reader_id in reader_ids:
            event = self.readers[reader_id].read_next_event(timeout=0.02)
            if event.event is None:
                self.caught_up.add(reader_id)
            else:
                self.read[reader_id] += 1
                self.caught_up.discard(reader_id)
        return True

    def close(self, reader_id: str) -> None:
        self.readers.pop(reader_id).close()

    def close_all(self) -> None:
        for reader in self.readers.values():
            reader.close()


@pytest.fixture
def readers(factory: EventStreamClientFactory) -> Iterator[Readers]:
    made = Readers(factory)
    try:
        yield made
    finally:
        made.close_all()


def lag_apart(
    group: ReaderGroup, readers: Readers, caught_up: str, lagging: str, segments: int
) -> None:
    """Write ~``PER_SEGMENT`` events per segment; ``caught_up`` reads all of its own and
    ``lagging`` reads ``READ_BY_LAGGARD`` of its own; wait until both committed there."""
    write(readers.factory, PER_SEGMENT * segments)
    wait_until(
        lambda: readers.step(lagging) and readers.read[lagging] >= READ_BY_LAGGARD,
        10,
        f"{READ_BY_LAGGARD} events read by {lagging}",
    )

    def committed() -> bool:
        state = group.refresh()
        mine = state.owned_by(caught_up)
        theirs = state.owned_by(lagging)
        return (
            caught_up in readers.caught_up
            and sum(a.position for a in mine.values()) == readers.read[caught_up]
            and sum(a.position for a in theirs.values()) > 0
        )

    wait_until(lambda: readers.step(caught_up) and committed(), 30, "both committed")
    assert readers.read[caught_up] > 0
    assert readers.read[lagging] == READ_BY_LAGGARD


@flavoured_on_redis(long=("async", "mixed"))  # 3-4 s each (make test: test_lag_reports)
@pytest.mark.parametrize(("caught_up", "lagging"), ORDERS)
def test_the_reader_closer_to_the_tails_acquires_a_freed_segment(
    redis_url: str, scope: str, stream: Any, readers: Readers, caught_up: str, lagging: str
) -> None:
    """Three segments, one each; the third reader leaves: its segment is the one extra
    segment, for the first of the two at their floor. The caught-up reader takes it, not the
    one ~120 events behind."""
    stream(3)
    group = ReaderGroupManager.from_url(scope, redis_url).get_reader_group("g")
    for reader_id in (lagging, caught_up, "leaver"):
        readers.join(reader_id)
    ids = {caught_up, lagging, "leaver"}
    wait_until(lambda: readers.step(*ids) and balanced(group, ids, 3), 30, "one segment each")
    lag_apart(group, readers, caught_up, lagging, 3)

    readers.close("leaver")
    ids = {caught_up, lagging}
    wait_until(lambda: readers.step(caught_up) and balanced(group, ids, 3), 30, "rebalanced")
    sizes = {r: len(s) for r, s in owned(group).items()}
    assert sizes == {caught_up: 2, lagging: 1}, (
        f"the lagging reader took the freed segment: {sizes}"
    )


@flavoured_on_redis(long=("async", "mixed"))  # 3-4 s each (make test: test_lag_reports)
@pytest.mark.parametrize(("caught_up", "lagging"), ORDERS)
def test_the_reader_further_behind_gives_a_segment_up_for_a_joining_one(
    redis_url: str, scope: str, stream: Any, readers: Readers, caught_up: str, lagging: str
) -> None:
    """Four segments, two each; a third reader joins: one segment must move to it (S/(N+1)
    in all, one), from the first donor in turn. The reader ~120 events behind gives it up,
    not the caught-up one."""
    stream(4)
    group = ReaderGroupManager.from_url(scope, redis_url).get_reader_group("g")
    for reader_id in (lagging, caught_up):
        readers.join(reader_id)
    ids = {caught_up, lagging}
    wait_until(lambda: readers.step(*ids) and balanced(group, ids, 4), 30, "two segments each")
    lag_apart(group, readers, caught_up, lagging, 4)

    readers.join("newcomer")
    ids = {caught_up, lagging, "newcomer"}
    wait_until(
        lambda: readers.step(caught_up, "newcomer") and balanced(group, ids, 4), 30, "rebalanced"
    )
    sizes = {r: len(s) for r, s in owned(group).items()}
    assert sizes == {caught_up: 2, lagging: 1, "newcomer": 1}, (
        f"the caught-up reader gave its segment up: {sizes}"
    )


def snapshot_form(redis_url: str, scope: str) -> int:
    """The form of the group state in the group log's newest snapshot."""
    with closing(RedisConnection.from_url(redis_url)) as connection:
        page = connection.log_backend.read(group_sync_name(scope, "g"), -1, 1)
    assert page.snapshot is not None
    body = msgpack.unpackb(page.snapshot, raw=False, strict_map_key=False, ext_hook=_ext)
    form: int = body["s"][1][0]
    return form


def _ext(code: int, payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=_ext)


def test_a_crashed_groups_compaction_is_readable_to_the_previous_version(
    redis_url: str, scope: str, stream: Any
) -> None:
    """Lags ride in a snapshot form the previous version does not read: written while a lag is
    known and a reader may rank by it. The rollback path stays open: once no member is live
    (readers that crashed), ``group compact`` leaves them out and writes the older form."""
    stream(2)
    with closing(RedisConnection.from_url(redis_url)) as connection:
        member, _ = join_group(connection, scope, "g", "crashed")
        member.rebalance({})
        seg, assignment = next(iter(member.refresh().owned_by("crashed").items()))
        member.commit({seg: (assignment.token, 0)}, lag=120)
        group = ReaderGroupManager(scope, connection).get_reader_group("g")
        assert dict(group.refresh().lag_reports) == {"crashed": 120}
        group.compact_log()  # live: the lags are kept
        assert snapshot_form(redis_url, scope) == LAGS_WIRE_FORM
        member.commit({seg: (assignment.token, 1)}, lag=110)
        member.heartbeats.forget("crashed", member.generation)  # it crashed: no live beat
        group.compact_log()
        assert snapshot_form(redis_url, scope) == WIRE_FORM
        assert "crashed" in group.refresh().readers
