"""StateSynchronizer behaviour, run unchanged against every backend (in-memory and Redis) and
both synchronizers (threaded, asyncio: ``flavour``, see :mod:`tests.support.async_adapter`)."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from statesync import (
    ConflictRetriesExhaustedError,
    CorruptEntryError,
    EntryTooLargeError,
    LogRegressedError,
    ManualClock,
    PoisonedEntryError,
    ReplicaNotLoadedError,
    RetryPolicy,
    StateSynchronizer,
    SyncConfig,
    SynchronizerNotFoundError,
    UnknownUpdateTypeError,
    Update,
    UpdateRejectedError,
)
from statesync.backend import (
    WAKE_STREAM_LENGTH,
    LogBackend,
    wakes_follower,
)
from statesync.codec import Codec, TypeRegistry
from statesync.redis_backend import RedisLogBackend
from tests.support.async_adapter import flavour, make_flavoured  # noqa: F401 (fixture)
from tests.support.model import (
    ALL_TYPES,
    Add,
    Claim,
    Explode,
    FailIfNegative,
    Notify,
    NotifyWatchers,
    Progress,
    Put,
)

pytestmark = pytest.mark.usefixtures("flavour")


def make(backend: LogBackend, name: str, **kwargs: Any) -> StateSynchronizer[Any]:
    kwargs.setdefault("update_types", ALL_TYPES)
    made: StateSynchronizer[Any] = make_flavoured(backend, name, **kwargs)
    return made


def append_raw(backend: LogBackend, name: str, payload: bytes) -> int:
    """Append bytes the way a buggy or hostile client would: past every client-side check."""
    outcome = backend.append(
        name,
        payload,
        expected_revision=None,
        writer="rogue",
        sequence=random.randrange(1, 2**40),
        max_bytes=1 << 20,
    )
    return outcome.revision


def test_the_documented_usage(backend: LogBackend, unique_name: str) -> None:
    sync = make(backend, unique_name)
    assert sync.initialize({"total": 0}) is True
    sync.update_state(lambda state: [Add(5)])
    sync.fetch_updates()
    assert sync.state["total"] == 5 and sync.revision > 0


def test_initialize_is_idempotent_and_the_first_writer_wins(
    backend: LogBackend, unique_name: str
) -> None:
    first, second = make(backend, unique_name), make(backend, unique_name)
    assert first.initialize({"total": 1}) is True
    first.update_state(lambda s: [Add(1)])
    assert second.initialize({"total": 100}) is False
    assert second.state == {"total": 2} and second.revision == 1


def test_state_before_loading_is_a_clear_error(backend: LogBackend, unique_name: str) -> None:
    sync = make(backend, unique_name)
    assert sync.revision == -1
    with pytest.raises(ReplicaNotLoadedError):
        _ = sync.state
    with pytest.raises(SynchronizerNotFoundError, match=unique_name):
        sync.fetch_updates()
    with pytest.raises(SynchronizerNotFoundError):
        sync.update_state(lambda s: [Add(1)])


def test_update_state_returns_the_generator_result(backend: LogBackend, unique_name: str) -> None:
    sync = make(backend, unique_name)
    sync.initialize({"total": 0})
    assert sync.update_state(lambda s: ([Add(3)], f"was {s['total']}")) == "was 0"
    assert sync.update_state(lambda s: ([], "nothing")) == "nothing"
    assert sync.revision == 1  # the empty update appended nothing


def test_a_stale_writer_reruns_its_generator_on_the_new_state(
    backend: LogBackend, unique_name: str
) -> None:
    a, b = make(backend, unique_name), make(backend, unique_name)
    a.initialize({"total": 0})
    b.fetch_updates()
    a.update_state(lambda s: [Put("owner", "a")])
    seen: list[Any] = []

    def claim(state: dict[str, Any]) -> Any:
        seen.append(state.get("owner"))
        if state.get("owner"):
            return [], False
        return [Put("owner", "b")], True

    assert b.update_state(claim) is False  # b saw a's claim on the retry and backed off
    assert seen == [None, "a"]
    assert b.state["owner"] == "a" and b.revision == a.revision == 1


def test_a_stale_handle_decides_nothing_and_refusals_on_the_newest_state(
    backend: LogBackend, unique_name: str
) -> None:
    a, stale = make(backend, unique_name), make(backend, unique_name)
    a.initialize({"total": 0})
    stale.fetch_updates()  # then never fetched again: a handle kept around
    a.update_state(lambda s: [Put("owner", "a")])

    def release(state: dict[str, Any]) -> Any:  # appends only if someone holds it
        return ([Put("owner", "")], True) if state.get("owner") else ([], False)

    assert stale.update_state(release) is True  # not "nothing to do" on the old state
    assert a.fetch_updates() == 1 and a.state["owner"] == ""
    a.update_state(lambda s: [Put("closed", True)])

    def refuse_when_closed(state: dict[str, Any]) -> Any:
        if not state.get("closed"):
            raise ValueError("not closed yet")
        return [], "closed"

    assert stale.update_state(refuse_when_closed) == "closed"
    assert stale.update_state(lambda s: ([], s.get("closed"))) is True
    appends = stale.stats.appends
    with pytest.raises(ValueError):  # on a fresh state the refusal stands
        a.update_state(lambda s: (_ for _ in ()).throw(ValueError("no")))
    assert stale.stats.appends == appends


def test_updates_that_wake_nobody_leave_followers_blocked(
    backend: LogBackend, unique_name: str
) -> None:
    writer, follower = make(backend, unique_name), make(backend, unique_name)
    writer.initialize({"total": 0})
    follower.fetch_updates()
    writer.update_state(lambda s: [Progress("done", 1)])
    writer.update_state_unconditionally([Progress("done", 2)])
    assert follower.wait_for_updates(0.05)  # the log has news...
    assert not follower.wait_for_updates(0.05, wakes_only=True)  # ...but none that wakes
    writer.update_state(lambda s: [Progress("done", 3), Put("owner", "w")])  # one wakes: all
    assert follower.wait_for_updates(0.05, wakes_only=True)
    assert follower.fetch_updates() == 3 and follower.state["owner"] == "w"
    assert not follower.wait_for_updates(0.05, wakes_only=True)  # woken up to its revision


def test_an_entry_wakes_only_the_followers_it_names(backend: LogBackend, unique_name: str) -> None:
    writer, late, follower = (make(backend, unique_name) for _ in range(3))
    writer.initialize({})
    late.fetch_updates()
    follower.fetch_updates()
    writer.update_state(lambda s: [Notify("k", 1, ())])  # nobody has anything to do
    assert not follower.wait_for_updates(0.05, wakes_only=True, follower="f")
    writer.update_state(lambda s: [Notify("k", 2, ("f",))])
    assert follower.wait_for_updates(0.05, wakes_only=True, follower="f")
    assert not follower.wait_for_updates(0.05, wakes_only=True, follower="g")  # not named
    assert not follower.wait_for_updates(0.05, wakes_only=True)  # nor anyone unnamed
    if isinstance(backend, RedisLogBackend):  # on the named follower's own wake stream only
        layout = backend.keys(unique_name)
        assert [e[0] for e in backend.client.xrange(layout.follower_wake("f"))] == [b"2-0"]
        assert backend.client.xrange(layout.wake) == []
        assert not backend.client.exists(layout.follower_wake("g"))
    follower.fetch_updates()
    writer.update_state(lambda s: [Notify("watchers", ("f",), ())])  # wakes nobody
    assert not follower.wait_for_updates(0.05, wakes_only=True, follower="f")
    # decided on a replica three entries behind, about another key: it lands past them, on a
    # state its writer did not see. Its wake-up names whom it named there (nobody: no watchers
    # yet); its writer, having read the log since, names them again on that state: "f"
    late.update_state(lambda s: [NotifyWatchers("j", 1)])
    assert late.stats.disjoint_appends == 1 and late.revision == 4
    assert follower.wait_for_updates(0.05, wakes_only=True, follower="f")
    assert not follower.wait_for_updates(0.05, wakes_only=True, follower="g")
    if isinstance(backend, RedisLogBackend):
        woken = backend.client.xrange(backend.keys(unique_name).follower_wake("f"))
        assert [e[0] for e in woken] == [b"2-0", b"4-1"]
    follower.fetch_updates()  # read past revision 4: neither of its wake-ups wakes it again
    assert not follower.wait_for_updates(0.05, wakes_only=True, follower="f")
    # a second naming at or past one that exists, or past the head, signals nothing
    assert not backend.wake(unique_name, 4, {"f"})
    assert not backend.wake(unique_name, 9, {"f"})
    assert not backend.wake(unique_name, 4, set())  # nobody named: nobody woken
    assert not follower.wait_for_updates(0.05, wakes_only=True)
    assert backend.wake(unique_name, 4, {"g"})  # g had not been woken at 4 yet
    assert backend.wait(unique_name, 3, 0.05, wakes_only=True, follower="g")
    with pytest.raises(SynchronizerNotFoundError):
        backend.wake(unique_name + "-none", 1, {"f"})
    assert backend.delete(unique_name)
    if isinstance(backend, RedisLogBackend):  # the followers' wake streams went with the log
        assert backend.client.keys(f"*{{{unique_name}}}*") == []


def test_wake_ups_trimmed_away_count_as_naming_everyone() -> None:
    def entry(revision: int, followers: str) -> list[Any]:
        return [f"{revision}-0".encode(), [b"r", str(revision).encode(), b"to", followers.encode()]]

    assert not wakes_follower([entry(1, "a\nb"), entry(2, "")], "c")
    assert wakes_follower([entry(1, "a\nb")], "b")
    assert wakes_follower([[b"3-0", [b"r", b"3"]]], "c")  # no names: for everyone
    # as many as the stream keeps: older ones may have been trimmed, and named this follower
    assert wakes_follower([entry(n, "a") for n in range(WAKE_STREAM_LENGTH)], "c")


def test_a_decision_on_a_state_the_caller_just_fetched_reads_the_log_once(
    backend: LogBackend, unique_name: str
) -> None:
    a, b = make(backend, unique_name), make(backend, unique_name)
    a.initialize({"total": 0})
    b.fetch_updates()
    reads = b.stats.reads
    assert b.update_state(lambda s: ([], "idle"), fetched_at=b.revision) == "idle"
    assert b.stats.reads == reads  # nothing to do, decided on the caller's fresh state
    a.update_state(lambda s: [Put("owner", "a")])
    stale = b.revision - 1  # not the revision the replica is at: not fresh
    assert b.update_state(lambda s: ([], s.get("owner")), fetched_at=stale) == "a"
    assert b.stats.reads == reads + 1


def test_updates_about_other_keys_do_not_conflict(backend: LogBackend, unique_name: str) -> None:
    a, b = make(backend, unique_name), make(backend, unique_name)
    a.initialize({"total": 0})
    b.fetch_updates()
    a.update_state(lambda s: [Claim("x", "a")])

    def claim(key: str) -> Any:
        def run(state: dict[str, Any]) -> Any:
            return ([], False) if state.get(key) else ([Claim(key, "b")], True)

        return run

    assert b.update_state(claim("y"), fetched_at=b.revision) is True  # lands past a's entry
    assert b.stats.conflicts == 0 and b.stats.disjoint_appends == 1
    assert b.revision == 2 and b.state == {"total": 0, "x": "a", "y": "b"}  # caught up
    a.update_state(lambda s: [Claim("z", "a")])
    assert b.update_state(claim("z"), fetched_at=b.revision) is False  # same key: re-run
    assert b.stats.conflicts == 1
    a.update_state(lambda s: [Put("w", 1)])  # concerns the whole state
    assert b.update_state(claim("v"), fetched_at=b.revision) is True
    assert b.stats.conflicts == 2 and b.state["v"] == "b"
    a.fetch_updates()
    assert a.state == b.state and a.revision == b.revision == 5


def test_conditional_updates_from_two_clients_are_serialised(
    backend: LogBackend, unique_name: str
) -> None:
    a, b = make(backend, unique_name), make(backend, unique_name)
    a.initialize({"total": 0})
    b.fetch_updates()
    for _ in range(20):
        a.update_state(lambda s: [Add(1)])
        b.update_state(lambda s: [Add(2)])
    a.fetch_updates()
    assert a.state == b.state == {"total": 60}
    assert a.revision == b.revision == 40


def test_rejected_updates_are_not_appended(backend: LogBackend, unique_name: str) -> None:
    sync = make(backend, unique_name)
    sync.initialize({"total": 1})
    with pytest.raises(UpdateRejectedError, match="FailIfNegative") as caught:
        sync.update_state(lambda s: [Add(1), FailIfNegative(-5)])
    assert isinstance(caught.value.__cause__, ValueError)
    other = make(backend, unique_name)
    other.fetch_updates()
    assert other.revision == 0 and other.state == {"total": 1}
    with pytest.raises(UpdateRejectedError):
        sync.update_state_unconditionally([FailIfNegative(-5)])
    other.fetch_updates()
    assert other.revision == 0


def test_oversized_entries_are_refused_and_nothing_is_appended(
    backend: LogBackend, unique_name: str
) -> None:
    sync = make(backend, unique_name, config=SyncConfig(max_entry_bytes=1024))
    sync.initialize({"total": 0})
    with pytest.raises(EntryTooLargeError, match="over the limit of 1024"):
        sync.update_state(lambda s: [Put("blob", b"x" * 2000)])
    sync.update_state(lambda s: [Put("blob", b"x" * 500)])
    assert sync.revision == 1


def test_the_append_script_enforces_the_size_limit_too(
    backend: LogBackend, unique_name: str
) -> None:
    make(backend, unique_name).initialize({"total": 0})
    with pytest.raises(EntryTooLargeError):
        backend.append(
            unique_name, b"y" * 100, expected_revision=None, writer="w", sequence=1, max_bytes=10
        )


def test_unconditional_updates_land_whatever_the_revision(
    backend: LogBackend, unique_name: str
) -> None:
    a, b = make(backend, unique_name), make(backend, unique_name)
    a.initialize({"total": 0})
    b.fetch_updates()
    a.update_state(lambda s: [Add(1)])
    revision = b.update_state_unconditionally([Add(10)])  # b is one behind
    assert revision == 2 and b.revision == 2 and b.state == {"total": 11}


def test_exhausted_retries_raise_a_retriable_error(backend: LogBackend, unique_name: str) -> None:
    policy = RetryPolicy(max_attempts=3, deadline=60, base_delay=0.01, max_delay=0.02)
    clock = ManualClock()
    victim = make(backend, unique_name, config=SyncConfig(retry=policy), clock=clock)
    rival = make(backend, unique_name)
    victim.initialize({"total": 0})
    rival.fetch_updates()

    def always_overtaken(state: dict[str, Any]) -> list[Update]:
        rival.update_state(lambda s: [Add(1)])  # the log moves before every append
        return [Add(100)]

    with pytest.raises(ConflictRetriesExhaustedError, match="after 3 attempts") as caught:
        victim.update_state(always_overtaken)
    assert caught.value.retriable
    rival.fetch_updates()
    assert rival.state == {"total": 3}  # none of the victim's updates landed
    assert victim.stats.conflicts == 3 and victim.stats.appends == 0
    assert 0 < clock.monotonic() < 0.05  # it backed off between attempts, on the fake clock


def test_compaction_keeps_the_state_and_lets_fresh_clients_catch_up(
    backend: LogBackend, unique_name: str
) -> None:
    writer = make(backend, unique_name)
    writer.initialize({"total": 0})
    behind = make(backend, unique_name)
    behind.fetch_updates()
    for _ in range(30):
        writer.update_state(lambda s: [Add(1)])
    assert writer.compact().compacted
    for _ in range(30):
        writer.update_state(lambda s: [Add(1)])
    second = writer.compact()
    assert second.compacted and second.truncated_through == 30 and second.removed_entries == 30
    assert not writer.compact().compacted  # nothing new: a no-op
    fresh = make(backend, unique_name)
    fresh.fetch_updates()
    assert fresh.state == {"total": 60} and fresh.revision == 60
    behind.fetch_updates()  # at revision 0, far behind the truncation point
    assert behind.state == {"total": 60} and behind.revision == 60
    assert behind.stats.snapshots_loaded == 2  # the initial one, then the jump past truncation


def test_snapshot_fn_shapes_what_is_stored(backend: LogBackend, unique_name: str) -> None:
    sync = make(backend, unique_name)
    sync.initialize({"total": 0, "scratch": "big"})
    sync.update_state(lambda s: [Add(1)])
    sync.compact(lambda s: {k: v for k, v in s.items() if k != "scratch"})
    for _ in range(2):
        sync.update_state(lambda s: [Add(1)])
    sync.compact()  # truncates the log behind the first snapshot
    fresh = make(backend, unique_name)
    fresh.fetch_updates()
    assert fresh.state == sync.state == {"total": 3}


def test_wait_for_updates_wakes_on_another_clients_append(
    backend: LogBackend, unique_name: str
) -> None:
    waiter, writer = make(backend, unique_name), make(backend, unique_name)
    waiter.initialize({"total": 0})
    writer.fetch_updates()
    assert waiter.wait_for_updates(0.05) is False
    woke: list[bool] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        woke.append(waiter.wait_for_updates(30.0))

    thread = threading.Thread(target=wait)
    thread.start()
    started.wait(5)
    writer.update_state(lambda s: [Add(1)])
    thread.join(20)
    assert woke == [True]  # it returned because of the append, long before its 30 s timeout
    assert waiter.fetch_updates() == 1


def test_wait_returns_at_once_when_already_behind(backend: LogBackend, unique_name: str) -> None:
    a, b = make(backend, unique_name), make(backend, unique_name)
    a.initialize({"total": 0})
    b.fetch_updates()
    a.update_state(lambda s: [Add(1)])
    assert b.wait_for_updates(30.0) is True


def test_corrupt_entries_stop_the_replica_at_the_last_good_revision(
    backend: LogBackend, unique_name: str
) -> None:
    writer, reader = make(backend, unique_name), make(backend, unique_name)
    writer.initialize({"total": 0})
    reader.fetch_updates()
    writer.update_state(lambda s: [Add(1)])
    bad = append_raw(backend, unique_name, b"\xc1 not msgpack")
    with pytest.raises(CorruptEntryError, match=rf"{unique_name}.*revision {bad}") as caught:
        reader.fetch_updates()
    assert caught.value.revision == bad and caught.value.last_good_revision == bad - 1
    assert reader.revision == bad - 1 and reader.state == {"total": 1}
    with pytest.raises(CorruptEntryError):  # stays stopped, never skips silently
        reader.fetch_updates()
    assert reader.state == {"total": 1}


def test_unknown_update_types_are_named(backend: LogBackend, unique_name: str) -> None:
    @dataclass(frozen=True)
    class Unheard(Update):
        def apply_to(self, state: Any) -> Any:
            return state

    reader = make(backend, unique_name)
    reader.initialize({"total": 0})
    payload = Codec(TypeRegistry([Unheard])).encode_entry("w", [Unheard()])
    revision = append_raw(backend, unique_name, payload)
    with pytest.raises(UnknownUpdateTypeError, match="'Unheard'") as caught:
        reader.fetch_updates()
    assert caught.value.revision == revision and reader.revision == revision - 1


def test_a_poisoned_entry_never_half_applies(backend: LogBackend, unique_name: str) -> None:
    reader = make(backend, unique_name, update_types=[*ALL_TYPES, Explode])
    reader.initialize({"total": 0})
    payload = Codec(TypeRegistry([Add, Explode])).encode_entry("w", [Add(5), Explode()])
    revision = append_raw(backend, unique_name, payload)
    with pytest.raises(PoisonedEntryError, match=r"Explode\.apply_to raised") as caught:
        reader.fetch_updates()
    assert caught.value.revision == revision
    assert reader.state == {"total": 0} and reader.revision == revision - 1  # Add(5) not kept


def test_a_writer_that_would_poison_the_log_is_stopped_first(
    backend: LogBackend, unique_name: str
) -> None:
    sync = make(backend, unique_name, update_types=[Add, Explode])
    sync.initialize({"total": 0})
    with pytest.raises(UpdateRejectedError):
        sync.update_state(lambda s: [Explode()])
    assert make(backend, unique_name).initialize({"total": 9}) is False


def test_delete_and_recreate_is_detected(backend: LogBackend, unique_name: str) -> None:
    old, admin = make(backend, unique_name), make(backend, unique_name)
    old.initialize({"total": 0})
    old.update_state(lambda s: [Add(1)])
    assert admin.delete() is True
    with pytest.raises(SynchronizerNotFoundError):
        old.fetch_updates()
    admin.initialize({"total": 50})
    with pytest.raises(LogRegressedError, match="deleted and created again"):
        old.fetch_updates()
    assert old.state == {"total": 1}  # the local copy is kept until resync
    old.resync()
    assert old.state == {"total": 50} and old.revision == 0


def test_compact_every_keeps_the_log_short(backend: LogBackend, unique_name: str) -> None:
    sync = make(backend, unique_name, config=SyncConfig(compact_every=10))
    sync.initialize({"total": 0})
    for _ in range(35):
        sync.update_state(lambda s: [Add(1)])
    assert sync.stats.auto_compactions == 3
    page = backend.read(unique_name, -1, 1000)
    assert page.snapshot_revision == 30 and len(page.entries) == 5  # snapshot 30, then 31..35
    fresh = make(backend, unique_name)
    fresh.fetch_updates()
    assert fresh.state == {"total": 35}


def test_followers_in_one_process_apply_each_entry_once(
    backend: LogBackend, unique_name: str
) -> None:
    writer, follower = make(backend, unique_name), make(backend, unique_name)
    own = make(backend, unique_name, config=SyncConfig(share_applied_states=False))
    writer.initialize({"total": 0})
    for n in range(5):
        writer.update_state(lambda s, n=n: [Add(n)])
    follower.fetch_updates()
    own.fetch_updates()
    # the follower took every state the writer reached; the one not sharing applied them all
    assert follower.stats.shared_applies == 5 and follower.stats.entries_applied == 5
    assert own.stats.shared_applies == 0 and own.stats.entries_applied == 5
    assert follower.state == own.state == writer.state == {"total": 10}
    assert follower.state is writer.state


def test_a_recreated_log_at_the_same_revision_is_not_served_an_old_state(
    backend: LogBackend, unique_name: str
) -> None:
    first = make(backend, unique_name)
    first.initialize({"total": 0})
    first.update_state(lambda s: [Add(1)])  # revision 1, state {"total": 1}, shared
    assert first.delete() is True
    second = make(backend, unique_name)
    second.initialize({"total": 0})
    second.update_state(lambda s: [Add(7)])  # revision 1 again, another history
    fresh = make(backend, unique_name)
    fresh.fetch_updates()
    assert fresh.revision == 1 and fresh.state == {"total": 7}
