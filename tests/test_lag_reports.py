"""A reader's commit reports its lag (events behind the tails of its segments) once another
reader joined its group, whatever that reader's kind, so the balancing turns rank it: found
running test_lagging_readers on asyncio readers (an asyncio reader that committed before its
copy of the readers' announced log formats showed the newcomer reported no lag, and a joining
reader then took a segment from the caught-up reader instead of from it)."""

from __future__ import annotations

from typing import Any

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from tests.support.async_reader_adapter import (
    flavoured_on_redis,
    open_factory_fixture,  # noqa: F401 (a fixture)
    reader_flavour_fixture,  # noqa: F401 (a fixture)
    url_factory_fixture,  # noqa: F401 (a fixture)
)
from tests.support.waiting import wait_until

RARE_HEARTBEATS = {"heartbeat_interval": 20.0, "session_timeout": 60.0, "group_refresh_time": 0.1}
"""No heartbeat within the test after the join: only the commit path can learn of others."""


@flavoured_on_redis("sync", "async")
def test_a_commit_after_another_reader_joined_reports_the_readers_lag(
    redis_url: str, scope: str, factory: Any
) -> None:
    with StreamManager.from_url(redis_url) as sm:
        config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))
        sm.create_stream(scope, "orders", config)
    with factory.create_event_writer("orders", UTF8StringSerializer()) as writer:
        for i in range(200):
            writer.write_event(f"e{i}", routing_key=f"k{i % 16}")
    with ReaderGroupManager.from_url(scope, redis_url) as rgm:
        group_config = ReaderGroupConfig(
            streams=[f"{scope}/orders"], commit_mode="manual", **RARE_HEARTBEATS
        )
        rgm.create_reader_group("g", group_config)
        group = rgm.get_reader_group("g")
    first = factory.create_reader("first", "g", UTF8StringSerializer())
    read = 0
    while read < 10:
        read += first.read_next_event(timeout=1).event is not None
    with EventStreamClientFactory.from_url(scope, redis_url) as threaded:
        second = threaded.create_reader("second", "g", UTF8StringSerializer())
        wait_until(  # the first reader's state shows the second: it gave it a segment
            lambda: (
                first.read_batch(1, timeout=0.05) is not None and len(first.owned_segments()) == 1
            ),
            30,
            "a segment given to the second reader",
        )
        first.commit()
        reports = dict(group.refresh().lag_reports)
        assert reports.get("first", 0) > 0, reports
        second.close()
    first.close()
