"""Failover-safe state logs: incarnations and chained histories (issue 18, issue 19 items 11
and 12). Run unchanged against both backends; a lossy failover is simulated by rolling the log
back to a copy taken earlier (what a promoted replica that missed writes serves). Run on both
synchronizers too (threaded, asyncio: ``flavour``, see :mod:`tests.support.async_adapter`)."""

from __future__ import annotations

from typing import Any

import pytest

from statesync import LogRegressedError, PoisonedEntryError, StateSynchronizer
from statesync.backend import LogBackend
from statesync.codec import Codec, TypeRegistry
from tests.support.async_adapter import flavour, make_flavoured  # noqa: F401 (fixture)
from tests.support.failover import remember
from tests.support.model import ALL_TYPES, Add, Explode

pytestmark = pytest.mark.usefixtures("flavour")


def make(backend: LogBackend, name: str) -> StateSynchronizer[Any]:
    made: StateSynchronizer[Any] = make_flavoured(backend, name, update_types=[*ALL_TYPES, Explode])
    return made


def log_total(backend: LogBackend, name: str) -> tuple[int, int]:
    fresh = make(backend, name)
    fresh.fetch_updates()
    return fresh.revision, fresh.state["total"]


def test_a_conditional_update_never_lands_on_a_recreated_log(
    backend: LogBackend, unique_name: str
) -> None:
    old, admin = make(backend, unique_name), make(backend, unique_name)
    old.initialize({"total": 0})
    admin.delete()
    admin.initialize({"total": 100})
    with pytest.raises(LogRegressedError):
        old.update_state(lambda s: [Add(1)])
    assert log_total(backend, unique_name) == (0, 100)
    old.resync()
    old.update_state(lambda s: [Add(1)])
    assert log_total(backend, unique_name) == (1, 101)


def test_an_unconditional_update_never_lands_on_a_recreated_log(
    backend: LogBackend, unique_name: str
) -> None:
    old, admin = make(backend, unique_name), make(backend, unique_name)
    old.initialize({"total": 0})
    admin.delete()
    admin.initialize({"total": 100})
    with pytest.raises(LogRegressedError):
        old.update_state_unconditionally([Add(1)])
    assert log_total(backend, unique_name) == (0, 100)


def diverged(backend: LogBackend, name: str) -> tuple[Any, Any]:
    """Clients a and b at revision 3 of two different histories (a's write was lost)."""
    a, b = make(backend, name), make(backend, name)
    a.initialize({"total": 0})
    a.update_state(lambda s: [Add(1)])
    a.update_state(lambda s: [Add(1)])
    b.fetch_updates()
    failover = remember(backend, name)
    a.update_state(lambda s: [Add(199)])  # acknowledged, then lost by the failover
    failover()
    b.update_state(lambda s: [Add(1)])
    assert (a.revision, a.state["total"]) == (3, 201)
    assert (b.revision, b.state["total"]) == (3, 3)
    return a, b


def test_a_conditional_append_from_a_lost_history_is_refused(
    backend: LogBackend, unique_name: str
) -> None:
    a, _ = diverged(backend, unique_name)
    with pytest.raises(LogRegressedError, match="history"):
        a.update_state(lambda s: [Add(1)])
    assert log_total(backend, unique_name) == (3, 3)


def test_a_fetch_from_a_lost_history_is_refused(backend: LogBackend, unique_name: str) -> None:
    a, b = diverged(backend, unique_name)
    with pytest.raises(LogRegressedError, match="history"):
        a.fetch_updates()
    b.update_state(lambda s: [Add(1)])  # the log moves past a's revision
    with pytest.raises(LogRegressedError, match="history"):
        a.fetch_updates()
    assert a.state["total"] == 201  # kept until resync
    a.resync()
    assert (a.revision, a.state["total"]) == (4, 4)


def test_an_unconditional_append_from_a_lost_history_is_refused(
    backend: LogBackend, unique_name: str
) -> None:
    a, _ = diverged(backend, unique_name)
    with pytest.raises(LogRegressedError):
        a.update_state_unconditionally([Add(5)])
    assert log_total(backend, unique_name) == (3, 3)


def test_compaction_from_a_lost_history_is_refused(backend: LogBackend, unique_name: str) -> None:
    a, _ = diverged(backend, unique_name)
    with pytest.raises(LogRegressedError):
        a.compact()
    assert log_total(backend, unique_name) == (3, 3)


def test_histories_survive_compaction(backend: LogBackend, unique_name: str) -> None:
    a, b = make(backend, unique_name), make(backend, unique_name)
    a.initialize({"total": 0})
    for _ in range(3):
        a.update_state(lambda s: [Add(1)])
    b.fetch_updates()
    a.compact()
    a.update_state(lambda s: [Add(1)])
    a.compact()
    b.update_state(lambda s: [Add(1)])  # b's anchor (3) is the truncation point now
    a.update_state(lambda s: [Add(1)])
    late = make(backend, unique_name)
    late.fetch_updates()
    late.update_state(lambda s: [Add(1)])
    assert log_total(backend, unique_name) == (7, 7)


def append_poison(backend: LogBackend, name: str) -> None:
    """An entry whose update raises on every replica, appended past the writer-side check."""
    payload = Codec(TypeRegistry([Explode])).encode_entry("rogue", [Explode()])
    backend.append(
        name, payload, expected_revision=None, writer="rogue", sequence=1, max_bytes=1 << 20
    )


def test_a_poisoned_replica_refuses_an_unconditional_append_before_appending(
    backend: LogBackend, unique_name: str
) -> None:
    sync = make(backend, unique_name)
    sync.initialize({"total": 0})
    append_poison(backend, unique_name)
    with pytest.raises(PoisonedEntryError):
        sync.fetch_updates()
    with pytest.raises(PoisonedEntryError, match="nothing was appended"):
        sync.update_state_unconditionally([Add(1)])
    page = backend.read(unique_name, 0, 100)
    assert page.head_revision == 1  # only the poison


def test_an_unconditional_append_that_lands_before_a_poison_is_found_reports_success(
    backend: LogBackend, unique_name: str
) -> None:
    sync, behind = make(backend, unique_name), make(backend, unique_name)
    sync.initialize({"total": 0})
    behind.fetch_updates()
    append_poison(backend, unique_name)
    revision = behind.update_state_unconditionally([Add(1)])
    assert revision == 2  # it landed, and the call says so
    assert isinstance(behind.fetch_error, PoisonedEntryError)
    assert behind.revision == 0
    with pytest.raises(PoisonedEntryError):
        behind.fetch_updates()
