"""A deterministic reader-group simulation: the real protocol code (GroupMember, the pure core,
StateSynchronizer) on the in-memory backend, a fake clock and a fake stream topology."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from readergroup.admin.group_member import GroupMember
from readergroup.core.errors import ReaderAlreadyOnlineError
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import (
    STATE_TYPES,
    UPDATE_TYPES,
    GroupState,
    check_invariants,
    new_group,
)
from readergroup.core.routing import uniform_ranges
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


class GroupSimulation:
    """Readers join, beat, crash, restart, rebalance, commit and complete, on a fake clock."""

    def __init__(self, seed: int, segments: int = 8) -> None:
        self.rng = random.Random(seed)
        self.clock = ManualClock(1_000.0)
        self.backend = MemoryLogBackend(server_clock=self.now_ms)
        self.heartbeats = MemoryHeartbeatStore(self.now_ms)
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
