"""A deterministic reader-group simulation: the real protocol code (GroupMember, the pure core,
StateSynchronizer) on the in-memory backend, a fake clock and a fake stream topology.

:class:`GroupSimulation` plays random interleavings on a small group; :class:`ScaleSimulation`
plays membership changes on a large one (issue 15: 10,000 segments, 1,000 readers) and reports
per change the rounds until the group is balanced again, the log entries and the conflicting
appends it cost, checking every invariant after every round. Run the large one with
``make sim-scale`` (``python -m tests.support.group_sim --segments 10000 --readers 1000``).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from readergroup.admin.group_member import GroupMember
from readergroup.core.errors import ReaderAlreadyOnlineError
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import (
    STATE_TYPES,
    UPDATE_TYPES,
    GroupState,
    SegKey,
    check_invariants,
    new_group,
)
from readergroup.core.routing import segment_id, uniform_ranges
from readergroup.core.stream_config import ScalingPolicy, StreamConfiguration
from readergroup.core.stream_metadata import ScaleStream, StreamState, initial_state
from readergroup.testing.memory_heartbeats import MemoryHeartbeatStore
from statesync import ManualClock, MemoryLogBackend, StateSynchronizer

STREAM = "sim/stream"
SESSION_MS = 10_000


@dataclass
class SimReader:
    member: GroupMember
    alive: bool = True
    positions: dict[tuple[str, int], int] = field(default_factory=dict)


class _FakeClockGroup:
    """What both simulations run on: a seeded random source, a fake clock, the in-memory group
    log and heartbeats, and synchronizers of the group ``sim/g`` over them (``admin``: the
    one each simulation initializes and looks through)."""

    admin: StateSynchronizer[GroupState]

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.clock = ManualClock(1_000.0)
        self.backend = MemoryLogBackend(server_clock=self.now_ms)
        self.heartbeats = MemoryHeartbeatStore(self.now_ms)

    def now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)

    def sync(self) -> StateSynchronizer[GroupState]:
        return StateSynchronizer(
            self.backend,
            "group:sim/g",
            update_types=UPDATE_TYPES,
            state_types=STATE_TYPES,
            clock=self.clock,
            rng=random.Random(self.rng.random()),
        )

    def state(self) -> GroupState:
        self.admin.fetch_updates()
        state: GroupState = self.admin.state
        return state


class GroupSimulation(_FakeClockGroup):
    """Readers join, beat, crash, restart, rebalance, commit and complete, on a fake clock."""

    def __init__(self, seed: int, segments: int = 8) -> None:
        super().__init__(seed)
        config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
        self.stream: StreamState = initial_state("sim", "stream", config, 0)
        starts = {(STREAM, s): 0 for s in self.stream.segments}
        group_config = ReaderGroupConfig(streams=[STREAM], session_timeout=SESSION_MS / 1000)
        self.admin = self.sync()
        self.admin.initialize(new_group("sim", "g", group_config, starts, self.now_ms()))
        self.readers: dict[str, SimReader] = {}
        self.tails: dict[int, int] = dict.fromkeys(self.stream.segments, 50)
        self.fenced_commits = 0
        self.refused_joins = 0

    # -- actions ---------------------------------------------------------------------------
    def join(self, reader_id: str) -> None:
        member = GroupMember(
            self.sync(), self.heartbeats, reader_id, session_timeout_ms=SESSION_MS, max_moves=4
        )
        try:
            member.join()
        except ReaderAlreadyOnlineError:
            self.refused_joins += 1  # the previous incarnation's session has not expired yet
            return
        self.readers[reader_id] = SimReader(member)

    def crash(self, reader_id: str) -> None:
        self.readers[reader_id].alive = False

    def step(self, reader_id: str) -> None:
        """A live reader's periodic work: heartbeat, rebalance, read a little, commit, complete."""
        reader = self.readers[reader_id]
        member = reader.member
        liveness = member.heartbeat()
        if not liveness.member:
            reader.alive = False
            return
        owned = member.state.owned_by(reader_id)
        _, released = member.rebalance(
            {k: reader.positions.get(k, a.position) for k, a in owned.items()}
        )
        for key in released:
            reader.positions.pop(key, None)
        state = member.state
        mine = state.owned_by(reader_id)
        for key, assignment in mine.items():
            position = max(reader.positions.get(key, assignment.position), assignment.position)
            reader.positions[key] = min(self.tails[key[1]], position + self.rng.randint(0, 10))
        commits = {k: (mine[k].token, reader.positions[k]) for k in mine}
        member.commit(commits)
        for key, assignment in member.state.owned_by(reader_id).items():
            record = self.stream.segments[key[1]]
            if not record.active and reader.positions[key] >= self.tails[key[1]]:
                successors = tuple(
                    (
                        (STREAM, s),
                        tuple((STREAM, p) for p in self.stream.segments[s].predecessors),
                        0,
                    )
                    for s in record.successors
                )
                member.complete(key, assignment.token, successors, self.tails[key[1]])
                reader.positions.pop(key, None)

    def scale(self) -> None:
        active = self.stream.active_segments
        if self.rng.random() < 0.5 or len(active) < 2:
            record = self.rng.choice(active)
            sealed, ranges = (record.segment_id,), uniform_ranges(2, record.low, record.high)
        else:
            i = self.rng.randrange(len(active) - 1)
            sealed = (active[i].segment_id, active[i + 1].segment_id)
            ranges = [(active[i].low, active[i + 1].high)]
        self.stream = ScaleStream(
            self.stream.epoch + 1, sealed, tuple(ranges), self.now_ms()
        ).apply_to(self.stream)
        for segment in self.stream.epochs[-1].segments:
            self.tails.setdefault(segment, 30)

    def stale_commit(self, reader_id: str) -> None:
        """A crashed reader wakes up and tries to commit: it must be refused once removed."""
        reader = self.readers[reader_id]
        state = self.state()
        record = state.readers.get(reader_id)
        if record is not None and record.generation == reader.member.generation:
            return  # not removed yet: nothing to check
        try:
            reader.member.commit({(STREAM, 0): (1, 999)})
        except Exception as exc:
            assert type(exc).__name__ in ("ReaderNotInGroupError", "SegmentNotOwnedError"), exc
            self.fenced_commits += 1
        else:
            raise AssertionError("a removed reader's commit was accepted")

    def run(self, steps: int) -> None:
        ids = [f"r{i}" for i in range(10)]
        for reader_id in ids[:4]:
            self.join(reader_id)
        for _ in range(steps):
            roll = self.rng.random()
            live = [r for r, s in self.readers.items() if s.alive]
            dead = [r for r in ids if r not in live]
            if roll < 0.70 and live:
                self.step(self.rng.choice(live))
            elif roll < 0.74 and len(live) > 1:
                self.crash(self.rng.choice(live))
            elif roll < 0.79 and dead:
                reader_id = self.rng.choice(dead)
                if reader_id in self.readers and self.rng.random() < 0.5:
                    self.stale_commit(reader_id)
                else:
                    self.join(reader_id)
            elif roll < 0.81:
                self.scale()
            elif roll < 0.83 and len(live) > 1:  # someone stays to settle the group
                reader = self.readers[self.rng.choice(live)]
                reader.member.leave(reader.positions)
                reader.alive = False
            else:
                self.clock.advance(self.rng.uniform(0.1, 4.0))
            check_invariants(self.state())

    def settle(self, rounds: int = 200) -> GroupState:
        """Keep every live reader beating and balancing until nothing moves."""
        for _ in range(rounds):
            self.clock.advance(1.0)
            for reader_id, reader in sorted(self.readers.items()):
                if reader.alive:
                    self.step(reader_id)
        return self.state()


# -- at scale ---------------------------------------------------------------------------------
@dataclass
class ChangeReport:
    """What one membership change cost the group until it was balanced again."""

    change: str
    rounds: int
    """Rounds (every live reader heartbeats, then every live reader rebalances) until one in
    which nothing moved, with every segment owned and shares within one of each other."""
    entries: int
    """Group log entries appended (the change itself included)."""
    conflicts: int
    """Conditional appends that found their keys moved and were re-run on fresh state."""
    seconds: float
    """Wall time the simulation took (the protocol's clock is fake)."""


class ScaleSimulation(_FakeClockGroup):
    """``readers`` readers on ``segments`` segments of one stream, on the in-memory backend and
    a fake clock. A round: every live reader heartbeats and reads the group log, then every live
    reader rebalances on what it read, in a seeded random order, so readers decide on states
    that others' appends have moved past, as concurrent readers do. Invariants are checked
    after every round: :func:`check_invariants` (each segment in one place, owners online,
    tokens unique), no segment lost or duplicated, a successor assignable only once all its
    predecessors are completed."""

    def __init__(self, seed: int, segments: int, readers: int) -> None:
        super().__init__(seed)
        self.segments = segments
        self.target_readers = readers
        self.universe: set[SegKey] = {(STREAM, s) for s in range(segments)}
        self.predecessors: dict[SegKey, tuple[SegKey, ...]] = {}
        self.sealed: dict[SegKey, tuple[SegKey, ...]] = {}
        """Sealed segment -> its successors (completed by its owner on its next step)."""
        config = ReaderGroupConfig(streams=[STREAM], session_timeout=SESSION_MS / 1000)
        self.admin = self.sync()
        self.admin.initialize(
            new_group("sim", "g", config, dict.fromkeys(self.universe, 0), self.now_ms())
        )
        self.members: dict[str, GroupMember] = {}
        self.live: set[str] = set()
        self.next_id = 0

    # -- membership changes -----------------------------------------------------------------
    def join(self, count: int = 1) -> None:
        for _ in range(count):
            reader_id = f"r{self.next_id:05d}"
            self.next_id += 1
            member = GroupMember(
                self.sync(),
                self.heartbeats,
                reader_id,
                session_timeout_ms=SESSION_MS,
                max_moves=16,
            )
            member.join()
            self.members[reader_id] = member
            self.live.add(reader_id)

    def crash(self) -> None:
        """A reader stops beating; the others remove it once its session expires."""
        self.live.discard(self.rng.choice(sorted(self.live)))

    def leave(self) -> None:
        reader_id = self.rng.choice(sorted(self.live))
        self.members[reader_id].leave()
        self.live.discard(reader_id)

    def merge(self, pairs: int) -> None:
        """Seal ``2 x pairs`` owned neighbours and merge each pair into one successor (epoch 1):
        owners complete them on their next step; the successor waits for both."""
        state = self.state()
        ids = sorted(s for _, s in state.assigned if s < self.segments)
        for n in range(pairs):
            left, right = (STREAM, ids[2 * n]), (STREAM, ids[2 * n + 1])
            successor = (STREAM, segment_id(1, self.segments + n))
            self.predecessors[successor] = (left, right)
            self.sealed[left] = self.sealed[right] = (successor,)

    # -- rounds ---------------------------------------------------------------------------------
    def round(self) -> int:
        """One round; returns how many segments moved (acquired, released or completed)."""
        self.clock.advance(1.0)
        order = sorted(self.live)
        self.rng.shuffle(order)
        fetched: dict[str, int] = {}
        for reader_id in order:  # a heartbeat, and the wake-up's one read of the group log
            member = self.members[reader_id]
            if not member.heartbeat().member:
                self.live.discard(reader_id)
                continue
            member.refresh()
            fetched[reader_id] = member.sync.revision
        moved = 0
        for reader_id in order:
            if reader_id not in self.live:
                continue
            member = self.members[reader_id]
            acquired, released = member.rebalance({}, fetched_at=fetched[reader_id])
            moved += len(acquired) + len(released)
            moved += self._complete_sealed(member)
        self.check()
        return moved

    def _complete_sealed(self, member: GroupMember) -> int:
        done = 0
        for segment, assignment in member.state.owned_by(member.reader_id).items():
            successors = self.sealed.get(segment)
            if successors is None:
                continue
            handed = tuple((s, self.predecessors[s], 0) for s in successors)
            if member.complete(segment, assignment.token, handed, assignment.position):
                self.universe.update(successors)
                done += 1
        return done

    def check(self) -> None:
        state = self.state()
        check_invariants(state)
        places = [*state.assigned, *state.unassigned, *state.future, *state.completed]
        assert len(places) == len(set(places)), "a segment is in two places"
        assert set(places) == self.universe, (
            f"segments lost: {sorted(self.universe - set(places))[:5]}, "
            f"unknown: {sorted(set(places) - self.universe)[:5]}"
        )
        for segment in (*state.assigned, *state.unassigned):
            pending = [p for p in self.predecessors.get(segment, ()) if p not in state.completed]
            assert not pending, f"successor {segment} assignable before {pending} completed"

    def balanced(self) -> bool:
        state = self.state()
        counts = [len(state.owners().get(r, {})) for r in state.readers]
        sealed_left = any(s in state.assigned or s in state.unassigned for s in self.sealed)
        return (
            not state.unassigned
            and not sealed_left
            and set(state.readers) == self.live
            and (not counts or max(counts) - min(counts) <= 1)
        )

    def change(self, name: str, action: Callable[[], None], max_rounds: int = 60) -> ChangeReport:
        """Run ``action``, then rounds until one moves nothing on a balanced group."""
        began = time.perf_counter()
        entries, conflicts = self.admin.revision, self._conflicts()
        action()
        rounds = 0
        while True:
            rounds += 1
            moved = self.round()
            if not moved and self.balanced():
                break
            assert rounds < max_rounds, f"{name}: not balanced after {max_rounds} rounds"
        self.admin.fetch_updates()
        return ChangeReport(
            name,
            rounds,
            self.admin.revision - entries,
            self._conflicts() - conflicts,
            round(time.perf_counter() - began, 2),
        )

    def _conflicts(self) -> int:
        return sum(m.sync.stats.conflicts for m in self.members.values())

    def scenario(self) -> list[ChangeReport]:
        """Every reader joins at once; one more joins; one crashes; one leaves; segments merge."""
        session_rounds = SESSION_MS // 1000
        return [
            self.change(
                f"{self.target_readers} readers join", lambda: self.join(self.target_readers)
            ),
            self.change("one reader joins", self.join),
            self.change("one reader crashes", self.crash, max_rounds=session_rounds + 60),
            self.change("one reader leaves", self.leave),
            self.change(
                f"{max(1, self.segments // 100)} pairs of segments merge",
                lambda: self.merge(max(1, self.segments // 100)),
            ),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=ScaleSimulation.__doc__)
    parser.add_argument("--segments", type=int, default=10_000)
    parser.add_argument("--readers", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    began = time.perf_counter()
    sim = ScaleSimulation(args.seed, args.segments, args.readers)
    reports = sim.scenario()
    print(
        json.dumps(
            {
                "simulation": "group_scale",
                "segments": args.segments,
                "readers": args.readers,
                "seed": args.seed,
                "invariants": "held after every round",
                "changes": [asdict(r) for r in reports],
                "seconds": round(time.perf_counter() - began, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
