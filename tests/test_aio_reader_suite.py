"""The threaded reader suite (:mod:`tests.test_client_suite`: ownership, rebalancing, commits,
checkpoints, scaling) run again with asyncio readers, and with mixed groups (an asyncio and a
threaded reader in one group), on both backends: in memory (asyncio and threaded readers of one
:class:`~readergroup.testing.memory_connection.MemoryConnection`) and on the suite's real Redis
(both servers in ``make test``). The same test functions, unchanged: only the factory's
``create_reader`` differs (:mod:`tests.support.async_reader_adapter`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from readergroup import (
    EventStreamClientFactory,
    ReaderGroupManager,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
)
from readergroup.storage.connection_api import Connection
from tests import test_client_suite as suite
from tests import test_reader_group as group_suite
from tests.support.aio_backends import async_factories_of
from tests.support.async_reader_adapter import FlavouredFactory
from tests.support.connections import new_scope

SUITE: list[Callable[..., None]] = [
    suite.test_events_are_read_once_each_and_in_write_order_per_key,
    suite.test_two_readers_own_segments_exclusively_and_rebalance_when_one_leaves,
    suite.test_commit_on_get_a_new_reader_resumes_after_what_a_closed_one_returned,
    suite.test_a_checkpoint_covers_every_segment_and_reaches_every_reader,
    suite.test_a_split_is_read_in_write_order_across_predecessor_and_successors,
]


@pytest.fixture
def scope(connection: Connection) -> str:
    name = new_scope(connection)
    StreamManager(connection).create_stream(
        name,
        "orders",
        StreamConfiguration(scaling_policy=ScalingPolicy.fixed(suite.SEGMENTS)),
    )
    return name


@pytest.mark.parametrize("flavour", ["async", "mixed"])
@pytest.mark.parametrize("test", SUITE, ids=lambda t: t.__name__.removeprefix("test_"))
def test_the_reader_suite(
    test: Callable[..., Any],
    flavour: str,
    connection: Connection,
    scope: str,
    request: pytest.FixtureRequest,
) -> None:
    with EventStreamClientFactory(scope, connection) as threaded:
        factory = FlavouredFactory(threaded, async_factories_of(request, connection), flavour)
        try:
            test(connection, scope, factory)
            assert factory.readers, "no asyncio reader took part"
        finally:
            factory.close()


THREADED_ONLY = {
    "test_the_documented_usage",  # the threaded factory's own example
    "test_runner_processes_segments_in_parallel_and_each_in_order",  # run(): worker threads
}
GROUP_SUITE: list[Callable[..., None]] = [
    getattr(group_suite, name)
    for name in dir(group_suite)
    if name.startswith("test_")
    and name not in THREADED_ONLY
    and "factory" in getattr(group_suite, name).__code__.co_varnames
]


@pytest.mark.parametrize("flavour", ["async", "mixed"])
@pytest.mark.parametrize("test", GROUP_SUITE, ids=lambda t: t.__name__.removeprefix("test_"))
def test_the_group_suite(
    test: Callable[..., Any], flavour: str, connection: Connection, request: pytest.FixtureRequest
) -> None:
    scope = new_scope(connection)
    stream = group_suite.stream4.__wrapped__(connection, scope)  # type: ignore[attr-defined]
    with EventStreamClientFactory(scope, connection) as threaded:
        factory = FlavouredFactory(threaded, async_factories_of(request, connection), flavour)
        try:
            if "each_group_manager" in test.__code__.co_varnames:
                # (the suite's asyncio-manager flavour is test_reader_group's own: here the
                # readers are asyncio, the manager threaded)
                test(connection, scope, stream, factory, ReaderGroupManager(scope, connection))
            else:
                test(connection, scope, stream, factory)
            assert factory.readers, "no asyncio reader took part"
        finally:
            factory.close()
