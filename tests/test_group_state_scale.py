"""Group state at scale (issue 15): applying an entry costs O(size of the change), not O(S);
snapshots are written in a compact column form (format 2) and format-1 snapshots already in
Redis still decode; malformed compact snapshots are typed errors naming key and revision.

Cost is checked without timing: the state's collections are wrapped in counting maps, and an
update may read only as many items as it changes, whatever the group's size (a copy of a
segment map reads every item)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest

from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import (
    STATE_TYPES,
    UPDATE_TYPES,
    AckCheckpoint,
    AcquireSegments,
    AddReader,
    Assignment,
    CommitPositions,
    CompleteSegment,
    CompleteSegments,
    CreateCheckpoint,
    GroupState,
    ReleaseSegments,
    RemoveReader,
    SegKey,
    check_invariants,
    new_group,
)
from readergroup.core.persistent import PMap, PSet
from statesync import CorruptEntryError, StateSynchronizer
from statesync.codec import Codec, DecodeError, TypeRegistry
from statesync.redis_backend import RedisLogBackend
from statesync.update import Update
from tests.support.group_sim import GroupSimulation, ScaleSimulation

CODEC = Codec(TypeRegistry([*UPDATE_TYPES, *STATE_TYPES]))
S = "s/a"
FIXTURE = Path(__file__).parent / "support" / "group_snapshot_format1.hex"


# -- counting what an update reads ------------------------------------------------------------
class Visits:
    count = 0


class CountingMap(PMap[Any, Any]):
    """A PMap that counts the items read through it (an iteration reads them all)."""

    __slots__ = ("visits",)

    def __init__(self, visits: Visits, items: PMap[Any, Any]) -> None:
        super().__init__(items)
        self.visits = visits

    def _all(self) -> None:
        self.visits.count += len(self)

    def __getitem__(self, key: Any) -> Any:
        self.visits.count += 1
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self.visits.count += 1
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.visits.count += 1
        return super().__contains__(key)

    def __iter__(self) -> Iterator[Any]:
        self._all()
        return super().__iter__()

    def items(self) -> Any:
        self._all()
        return super().items()

    def keys(self) -> Any:
        self._all()
        return super().keys()

    def values(self) -> Any:
        self._all()
        return super().values()


class CountingSet(PSet[Any]):
    __slots__ = ("visits",)

    def __init__(self, visits: Visits, members: PSet[Any]) -> None:
        super().__init__(members)
        self.visits = visits

    def __contains__(self, member: object) -> bool:
        self.visits.count += 1
        return super().__contains__(member)

    def __iter__(self) -> Iterator[Any]:
        self.visits.count += len(self)
        return super().__iter__()


def grown_group(size: int) -> GroupState:
    """``size`` segments: four readers own all but 16, whose positions a checkpoint holds with
    every owner's (so it is O(size) too); reader ``small`` owns two and has not acknowledged it;
    one segment is completed."""
    config = ReaderGroupConfig(streams=[S])
    state = new_group("s", "g", config, {(S, i): 0 for i in range(size)}, 1)
    big = [f"r{i}" for i in range(4)]
    for reader_id in [*big, "small"]:
        state = AddReader(reader_id, 1).apply_to(state)
    owned = size - 16
    for i, reader_id in enumerate(big):
        mine = tuple((S, s) for s in range(i, owned, 4))
        state = AcquireSegments(reader_id, i + 1, mine, 2).apply_to(state)
    state = AcquireSegments("small", 5, ((S, owned), (S, owned + 1)), 2).apply_to(state)
    token = state.assigned[(S, 0)].token
    state = CompleteSegment("r0", 1, (S, 0), token, ()).apply_to(state)
    state = CreateCheckpoint("cp", 3).apply_to(state)
    for i, reader_id in enumerate(big):
        positions = tuple((k, a.position) for k, a in state.owned_by(reader_id).items())
        state = AckCheckpoint(reader_id, i + 1, "cp", positions, 4).apply_to(state)
    assert len(state.checkpoints[0].positions) >= size - 16
    return state


def counted(state: GroupState, visits: Visits) -> GroupState:
    """``state`` with every collection (owner index included) counting what is read."""
    owners = state.owners()
    wrapped = replace(
        state,
        readers=CountingMap(visits, PMap(state.readers)),
        assigned=CountingMap(visits, PMap(state.assigned)),
        unassigned=CountingMap(visits, PMap(state.unassigned)),
        future=CountingMap(visits, PMap(state.future)),
        completed=CountingSet(visits, PSet(state.completed)),
        waiting_ends=CountingMap(visits, PMap(state.waiting_ends)),
        checkpoints=tuple(
            replace(c, positions=CountingMap(visits, PMap(c.positions))) for c in state.checkpoints
        ),
    )
    index = {r: CountingMap(visits, PMap(m)) for r, m in owners.items()}
    object.__setattr__(wrapped, "_owners", CountingMap(visits, PMap(index)))
    visits.count = 0
    return wrapped


def updates_of_small(state: GroupState) -> dict[str, Update]:
    """One of each update a reader appends, by reader ``small`` (two segments, generation 5)."""
    mine = sorted(state.owned_by("small").items())
    (first, a), (second, b) = mine
    free = sorted(state.unassigned)[:2]
    successor, other = (S, 1_000_000), (S, 1_000_001)
    return {
        "join": AddReader("newcomer", 5),
        "acquire": AcquireSegments("small", 5, tuple(free), 6),
        "release": ReleaseSegments("small", 5, ((first, a.token, 3),)),
        "commit": CommitPositions("small", 5, ((first, a.token, 4), (second, b.token, 5))),
        "complete": CompleteSegment(
            "small", 5, first, a.token, ((successor, (first,), 0), (other, (first, second), 0)), 9
        ),
        "complete_both": CompleteSegments(
            "small", 5, ((first, a.token, 9), (second, b.token, 8)), ((other, (first, second), 0),)
        ),
        "ack_checkpoint": AckCheckpoint("small", 5, "cp", ((first, 1), (second, 2)), 6),
        "leave": RemoveReader("small", 5, ((first, 7),), 6),
    }


def visits_of(update: Update, size: int, *, carries_index: bool = True) -> int:
    visits = Visits()
    state = counted(grown_group(size), visits)
    after = update.apply_to(state)
    seen = visits.count
    if carries_index:
        assert after._owners is not None, "the owner index was dropped: O(S) to build again"
    check_invariants(after)
    return seen


@pytest.mark.parametrize("kind", list(updates_of_small(grown_group(64))))
def test_applying_an_entry_reads_only_what_it_changes(kind: str) -> None:
    small, large = (visits_of(updates_of_small(grown_group(n))[kind], n) for n in (256, 4096))
    assert small == large, f"{kind}: {small} items read at S=256, {large} at S=4096"
    assert large <= 40, f"{kind} read {large} items"


def _copying_acquire(self: AcquireSegments, state: GroupState) -> GroupState:
    """The acquisition as it was before issue 15: a copy of both segment maps per entry."""
    assigned, unassigned = dict(state.assigned), dict(state.unassigned)
    token = state.next_token
    for segment in self.segments:
        assigned[segment] = Assignment(self.reader_id, unassigned.pop(segment), token, 1)
        token += 1
    return replace(state, assigned=assigned, unassigned=unassigned, next_token=token)


def test_the_count_sees_an_apply_that_copies_the_segment_maps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(AcquireSegments, "apply_to", _copying_acquire)
    small, large = (
        visits_of(updates_of_small(grown_group(n))["acquire"], n, carries_index=False)
        for n in (256, 4096)
    )
    assert small >= 256 and large >= 4096  # every item read: the count sees the copy


def test_older_states_are_never_changed_by_later_updates() -> None:
    state = grown_group(64)
    before = {
        "readers": dict(state.readers),
        "assigned": dict(state.assigned),
        "unassigned": dict(state.unassigned),
        "future": dict(state.future),
        "completed": set(state.completed),
        "owners": {r: dict(m) for r, m in state.owners().items()},
        "checkpoint": dict(state.checkpoints[0].positions),
    }
    for update in updates_of_small(state).values():
        check_invariants(update.apply_to(state))
    assert dict(state.readers) == before["readers"]
    assert dict(state.assigned) == before["assigned"]
    assert dict(state.unassigned) == before["unassigned"]
    assert dict(state.future) == before["future"] and set(state.completed) == before["completed"]
    assert {r: dict(m) for r, m in state.owners().items()} == before["owners"]
    assert dict(state.checkpoints[0].positions) == before["checkpoint"]
    check_invariants(state)


# -- snapshots --------------------------------------------------------------------------------
A, B = "s/a", "s/b"


def sample_group() -> GroupState:
    """Every place of a group state filled: two streams, owners, a waiting successor with a
    completed predecessor's end, a completed checkpoint and an outstanding one, a bounded end.
    (Built by the same calls as the format-1 fixture, which the library before issue 15 wrote.)
    """
    config = ReaderGroupConfig(streams=[A, B])
    starts = {(A, 0): 0, (A, 1): 5, (B, 0): 7, (B, 4294967296): 0}
    end = {**dict.fromkeys(starts, 100), (A, 2): 100}
    state = new_group("s", "g", config, starts, 1_000, end=end)
    state = AddReader("r1", 1_001).apply_to(state)
    state = AddReader("r2", 1_002).apply_to(state)
    state = AcquireSegments("r1", 1, ((A, 0), (A, 1)), 1_003).apply_to(state)
    state = AcquireSegments("r2", 2, ((B, 0),), 1_004).apply_to(state)
    state = CommitPositions("r1", 1, (((A, 0), 1, 40), ((A, 1), 2, 9))).apply_to(state)
    merged = ((A, 2), ((A, 0), (A, 1)), 0)
    state = CompleteSegment("r1", 1, (A, 0), 1, (merged,), end=40).apply_to(state)
    state = CreateCheckpoint("cp-1", 1_005).apply_to(state)
    state = AckCheckpoint("r1", 1, "cp-1", (((A, 1), 9),), 1_006).apply_to(state)
    state = AckCheckpoint("r2", 2, "cp-1", (((B, 0), 7),), 1_007).apply_to(state)
    return CreateCheckpoint("cp-2", 1_008).apply_to(state)


def head_version(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=lambda code, payload: None, raw=False)["v"]


def test_group_snapshots_round_trip_in_the_compact_form() -> None:
    sim = GroupSimulation(seed=3, segments=8)
    sim.run(300)
    for state in (sample_group(), sim.state(), grown_group(64)):
        data = CODEC.encode_snapshot(5, 6, state)
        assert head_version(data) == 2
        decoded = CODEC.decode_snapshot(data)
        assert (decoded.revision, decoded.server_time_ms) == (5, 6)
        assert decoded.state == state
        check_invariants(decoded.state)
        assert decoded.state.counts() == state.counts()
    assert len(CODEC.encode_snapshot(1, 1, grown_group(1024))) * 4 < len(
        CODEC.generic().encode_snapshot(1, 1, grown_group(1024))
    )


def test_format_1_snapshots_written_before_still_decode() -> None:
    old = bytes.fromhex(FIXTURE.read_text().strip())
    assert head_version(old) == 1
    decoded = CODEC.decode_snapshot(old)
    assert (decoded.revision, decoded.server_time_ms) == (12, 3456)
    assert decoded.state == sample_group()
    assert isinstance(decoded.state.assigned, PMap) and isinstance(decoded.state.completed, PSet)
    rewritten = CODEC.generic().encode_snapshot(12, 3456, sample_group())
    assert head_version(rewritten) == 1 and CODEC.decode_snapshot(rewritten).state == decoded.state


def wire_of(state: GroupState) -> list[Any]:
    return state.to_wire()


def _malformed() -> dict[str, Any]:
    good = wire_of(sample_group())

    def changed(path: tuple[int, ...], value: Any) -> list[Any]:
        wire = msgpack.unpackb(CODEC.encode_value(good), ext_hook=msgpack.ExtType, raw=False)
        target = wire
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        return wire

    def twice() -> list[Any]:
        wire = changed((6, 0), [0, 0])
        wire[6][1] = [1, 1]  # both assigned rows: segment 1 of the first stream
        return wire

    return {
        "short": good[:-1],
        "form": changed((0,), 99),
        "stream index": changed((6, 0), [0, 7]),
        "ids length": changed((6, 1), [1]),
        "position type": changed((6, 3), ["x", 1]),
        "owner index": changed((6, 2), [5, 0]),
        "reader ids": changed((5, 0), [1, 2]),
        "counters": changed((11,), "many"),
        "checkpoint": changed((14, 0), ["cp", 1]),
        "future": changed((8,), {"a": 1}),
        "segment twice": twice(),
    }


@pytest.mark.parametrize("kind", list(_malformed()))
def test_malformed_compact_group_states_are_decode_errors(kind: str) -> None:
    wire = _malformed()[kind]
    payload = msgpack.ExtType(4, CODEC.encode_value(["GroupState", wire]))
    data = msgpack.packb({"v": 2, "r": 1, "t": 1, "s": payload}, use_bin_type=True)
    with pytest.raises(DecodeError, match="cannot build GroupState from its compact form"):
        CODEC.decode_snapshot(data)


def test_a_segment_assigned_twice_in_a_snapshot_is_named() -> None:
    wire = _malformed()["segment twice"]
    with pytest.raises(ValueError, match="assigned list a segment twice"):
        GroupState.from_wire(wire)


def test_decoding_a_snapshot_builds_no_object_per_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot decodes to maps over its columns: an ``Assignment`` is built when read (a
    reader reads its own share and the counts), not one per segment of the group."""
    data = CODEC.encode_snapshot(1, 1, grown_group(4096))
    built = Visits()

    class CountedAssignment(Assignment):
        __slots__ = ()

        def __init__(self, *args: Any) -> None:
            built.count += 1
            super().__init__(*args)

    monkeypatch.setattr("readergroup.core.group_state.Assignment", CountedAssignment)
    state = CODEC.decode_snapshot(data).state
    assert built.count == 0  # was 4096: one per assigned segment
    assert state.counts()["small"] == 2 and len(state.assigned) == 4096 - 16 + 2 - 1
    assert len(state.owned_by("small")) == 2 and built.count == 2


@pytest.mark.parametrize("kind", list(updates_of_small(grown_group(64))))
def test_a_decoded_state_changes_like_the_state_it_was_written_from(kind: str) -> None:
    """Each update applied to a decoded state (maps over snapshot columns) gives the state it
    gives on the original, owner index included; that state's snapshot round-trips too."""
    original = grown_group(256)
    decoded = CODEC.decode_snapshot(CODEC.encode_snapshot(1, 1, original)).state
    update = updates_of_small(original)[kind]
    expected, got = update.apply_to(original), update.apply_to(decoded)
    check_invariants(got)
    assert got == expected and got.counts() == expected.counts()
    assert {r: dict(m) for r, m in got.owners().items()} == {
        r: dict(m) for r, m in expected.owners().items()
    }
    again = CODEC.decode_snapshot(CODEC.encode_snapshot(2, 2, got)).state
    check_invariants(again)
    assert again == expected and again.counts() == expected.counts()


@pytest.mark.parametrize("kind", ["acquire", "release", "commit", "complete_both", "leave"])
def test_applying_an_entry_to_a_decoded_state_reads_only_what_it_changes(kind: str) -> None:
    def visits(size: int) -> int:
        counter = Visits()
        original = grown_group(size)
        decoded = CODEC.decode_snapshot(CODEC.encode_snapshot(1, 1, original)).state
        after = updates_of_small(original)[kind].apply_to(counted(decoded, counter))
        seen = counter.count
        check_invariants(after)
        return seen

    assert visits(256) == visits(4096) <= 40


@pytest.fixture
def backend(redis_url: str) -> Iterator[RedisLogBackend]:
    backend = RedisLogBackend.from_url(redis_url)
    yield backend
    backend.close()


def test_a_format_1_group_snapshot_in_redis_is_read_and_compacted_again(
    backend: RedisLogBackend,
) -> None:
    name = f"group:s/{uuid.uuid4().hex[:8]}"
    old = msgpack.unpackb(bytes.fromhex(FIXTURE.read_text().strip()), ext_hook=msgpack.ExtType)
    old["r"] = 0  # the state's bytes as the older library wrote them, as a new log's start
    assert backend.initialize(name, msgpack.packb(old), uuid.uuid4().hex)
    sync: StateSynchronizer[GroupState] = StateSynchronizer(
        backend, name, update_types=UPDATE_TYPES, state_types=STATE_TYPES
    )
    sync.fetch_updates()
    assert sync.state == sample_group()
    sync.update_state(lambda s: [AddReader("r3", 1_009)])
    sync.compact()
    fresh: StateSynchronizer[GroupState] = StateSynchronizer(
        backend, name, update_types=UPDATE_TYPES, state_types=STATE_TYPES
    )
    fresh.fetch_updates()
    assert fresh.state == sync.state and "r3" in fresh.state.readers
    sync.close()
    fresh.close()


def test_a_malformed_compact_snapshot_in_redis_names_key_and_revision(
    backend: RedisLogBackend,
) -> None:
    name = f"group:s/{uuid.uuid4().hex[:8]}"
    payload = msgpack.ExtType(4, CODEC.encode_value(["GroupState", _malformed()["owner index"]]))
    bad = msgpack.packb({"v": 2, "r": 0, "t": 0, "s": payload}, use_bin_type=True)
    assert backend.initialize(name, bad, uuid.uuid4().hex)
    sync: StateSynchronizer[GroupState] = StateSynchronizer(
        backend, name, update_types=UPDATE_TYPES, state_types=STATE_TYPES
    )
    with pytest.raises(CorruptEntryError, match="revision 0") as caught:
        sync.fetch_updates()
    assert name in str(caught.value) and "owners outside the table" in str(caught.value)
    sync.close()


def test_sets_of_segments_keep_their_key_types() -> None:
    keys: list[SegKey] = [(A, 1), (B, 4294967296)]
    assert PSet(keys) == frozenset(keys) and frozenset(keys) == PSet(keys)
    assert PSet(keys) | {(A, 2)} == {*keys, (A, 2)} and set(keys) <= PSet(keys)
    plain, persistent = {(A, 1): 2}, PMap({(A, 1): 2})
    assert persistent == plain and plain == persistent and plain != PMap({(A, 1): 3})


# -- the simulation at scale (small here; ``make sim-scale`` runs 10,000 x 1,000) ---------------
def test_membership_changes_on_a_large_group_keep_every_invariant() -> None:
    sim = ScaleSimulation(seed=7, segments=400, readers=40)
    reports = sim.scenario()  # invariants are checked after every round of every change
    assert [r.change for r in reports] == [
        "40 readers join",
        "one reader joins",
        "one reader crashes",
        "one reader leaves",
        "4 pairs of segments merge",
    ]
    for report in reports:
        assert report.rounds >= 1 and report.entries >= 1, report
    state = sim.state()
    merged = [s for s in sim.predecessors if s in state.assigned]
    assert len(merged) == 4 and len(state.completed) == 8
    assert len(state.readers) == 40 + 1 - 2 and not state.unassigned


def test_one_reader_joining_or_leaving_moves_only_what_is_needed() -> None:
    """No herd: when one reader joins 20 (200 segments, the new floor 9), only the 9 readers
    whose turn it is release one segment each (every reader above the floor did); when one
    leaves, its 10 segments go to the first 10 readers in turn (all 19 went for them)."""
    sim = ScaleSimulation(seed=3, segments=200, readers=20)
    sim.change("20 readers join", lambda: sim.join(20))
    joined = sim.change("one reader joins", sim.join)
    left = sim.change("one reader leaves", sim.leave)
    assert joined.entries <= 9 + 2 and joined.conflicts == 0, joined  # releases, join, acquire
    assert left.entries <= 10 + 1 and left.conflicts == 0, left  # acquisitions, the leave
