"""Group maintenance runs off the reading thread (real Redis): a rebalance, a commit and a join
proceed while the application holds buffered events without reading, while a read call hands
out buffered events on a slow link, and while ``run()``'s queue is full."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import urlparse

from readergroup import (
    EventStreamClientFactory,
    EventStreamReader,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.client.event_read import EventRead
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
    url_factory_fixture,  # noqa: F401 (a fixture)
)
from tests.support.proxy import ReplyDroppingProxy
from tests.support.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "session_timeout": 2.0, "group_refresh_time": 0.05}


def setup(
    redis_url: str,
    scope: str,
    factory: EventStreamClientFactory,
    *,
    segments: int,
    events: int,
    **config: Any,
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        sm.create_stream(
            scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        )
    with factory.create_event_writer("s", UTF8StringSerializer()) as writer:
        futures = [writer.write_event(f"e{i}", routing_key=f"k{i}") for i in range(events)]
        for future in futures:
            future.result(10)
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"], **config))


def read_until(
    reader: EventStreamReader[str], done: Callable[[], bool], what: str, into: list[str]
) -> None:
    def step() -> bool:
        event = reader.read_next_event(timeout=0.05)
        if event.event is not None:
            into.append(event.event)
        return done()

    wait_until(step, 30, what)


@flavoured_on_redis()
def test_a_rebalance_gives_a_segment_away_while_the_application_holds_buffered_events(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    setup(redis_url, scope, factory, segments=2, events=40, **FAST)
    a = factory.create_reader("a", "g", UTF8StringSerializer())
    first: list[str] = []
    read_until(a, lambda: len(a.owned_segments()) == 2 and bool(first), "a owns both", first)
    buffered = sum(len(o.buffer) for o in a._fetcher.owned.values())
    assert buffered > 0  # the application now holds events and does not read
    b = factory.create_reader("b", "g", UTF8StringSerializer())
    got_b: list[str] = []
    # b gets its share while a's application is busy: a's maintenance gives one segment away
    read_until(b, lambda: len(b.owned_segments()) == 1 and bool(got_b), "b reads", got_b)
    assert len(a.owned_segments()) == 1
    mine = set(a.owned_segments())
    got_a: list[str] = []

    def both_read() -> bool:
        event = a.read_next_event(timeout=0.02)
        if event.event is not None:
            assert (event.stream, event.segment) in mine  # nothing of the segment given away
            got_a.append(event.event)
        event = b.read_next_event(timeout=0.02)
        if event.event is not None:
            got_b.append(event.event)
        return len(set(first + got_a + got_b)) == 40

    wait_until(both_read, 30, "everything read")
    a.close()
    b.close()


def test_on_a_slow_link_buffered_events_flow_while_a_group_round_trip_is_in_flight(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    setup(
        redis_url,
        scope,
        factory,
        segments=1,
        events=3000,
        group_refresh_time=0.05,
        auto_commit_interval=0.1,
    )
    target = urlparse(redis_url)
    with (
        ReplyDroppingProxy(target.hostname or "", target.port or 0, reply_delay=0.2) as proxy,
        EventStreamClientFactory.from_url(scope, proxy.url) as slow,
    ):
        reader = slow.create_reader("r", "g", UTF8StringSerializer())
        member = reader._member
        in_flight = [0]

        def counted(method: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                in_flight[0] += 1
                try:
                    return method(*args, **kwargs)
                finally:
                    in_flight[0] -= 1

            return call

        # (the group round trips of maintenance only: the heartbeat thread makes neither)
        member.commit = counted(member.commit)  # type: ignore[method-assign]
        member.rebalance = counted(member.rebalance)  # type: ignore[method-assign]
        delivered: list[str] = []
        during = [0]

        def step() -> bool:
            event = reader.read_next_event(timeout=0.5)
            if event.event is not None:
                delivered.append(event.event)
                if in_flight[0]:
                    during[0] += 1  # handed out while a group round trip was under way
                time.sleep(0.001)  # the application's work on the event
            return during[0] >= 10

        wait_until(step, 60, "events handed out while group round trips are in flight")
        reader.close()
    assert delivered == [f"e{i}" for i in range(len(delivered))]


def test_run_with_a_slow_handler_and_a_full_queue_still_gives_a_joining_reader_its_share(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    setup(redis_url, scope, factory, segments=2, events=200, commit_mode="manual", **FAST)
    a = factory.create_reader("a", "g", UTF8StringSerializer())
    release = threading.Event()
    stop = threading.Event()
    started = threading.Event()

    def slow(event: EventRead[str]) -> None:
        started.set()
        release.wait(30)

    runner = threading.Thread(
        target=a.run,
        args=(slow,),
        kwargs={"max_workers": 1, "max_queued": 4, "stop": stop, "handle_signals": False},
        daemon=True,
    )
    runner.start()
    wait_until(lambda: started.is_set() and len(a.owned_segments()) == 2, 30, "a runs")
    b = factory.create_reader("b", "g", UTF8StringSerializer())
    got_b: list[str] = []
    read_until(b, lambda: len(b.owned_segments()) == 1 and bool(got_b), "b gets its share", got_b)
    assert len(a.owned_segments()) == 1
    release.set()
    stop.set()
    runner.join(30)
    assert not runner.is_alive()
    a.close()
    b.close()


@flavoured_on_redis()
def test_a_reader_whose_own_move_gives_it_the_next_one_makes_that_too(
    redis_url: str, scope: str, factory: EventStreamClientFactory
) -> None:
    """7 segments, 3 readers; one leaves. The one left below the floor (3) takes its floor
    share, which can make it the first in turn for the last unassigned segment: its own entry
    then names it. It used to skip that wake-up (its maintenance thread had read past it) and
    the segment stayed unassigned until some other change. Every order of names is tried, as
    the turn depends on them."""
    setup(redis_url, scope, factory, segments=7, events=0)

    def own_all(readers: dict[str, EventStreamReader[str]], names: str) -> bool:
        for name in names:
            readers[name].read_next_event(timeout=0.02)
        return sum(len(readers[name].owned_segments()) for name in names) == 7

    for n, names in enumerate(["abc", "bac", "xyz", "yxz", "pqr", "qpr"]):
        group = f"g{n}"
        with ReaderGroupManager.from_url(scope, redis_url) as rgm:
            rgm.create_reader_group(group, ReaderGroupConfig(streams=[f"{scope}/s"], **FAST))
        readers = {r: factory.create_reader(r, group, UTF8StringSerializer()) for r in names}
        wait_until(partial(own_all, readers, names), 20, f"{names}: all 7 segments owned")
        readers[names[2]].close()
        left = names[:2]
        wait_until(partial(own_all, readers, left), 10, f"{names}: {left} own all 7 once one left")
        for r in left:
            readers[r].close()
