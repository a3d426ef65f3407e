"""Exhaustive small-scope explorer of the reader-group protocol over the pure core.

Every interleaving of up to ``depth`` steps of up to three readers and an administrator on a
stream that split and merged (0 -> A, B; B + 1 -> M), breadth first, with an invariant check
after every step. The steps call the real protocol code: :class:`GroupMember`'s methods (and
so the very generators of :mod:`readergroup.core.membership` that readers pass to ``update_state``),
the administrator's generators of :mod:`readergroup.admin.group_manager`, and the updates of
:mod:`readergroup.core.group_state` with :mod:`readergroup.core.balance`. Only the synchronizer is a
model (:class:`ModelSync`: the contract of ``StateSynchronizer.update_state``, in memory), and
the reading application is modelled by what a reader's shell decides (read, commit,
acknowledge, absorb a reset, leave, crash).

**Append conflicts.** Any step that appends may first lose a race: another actor's complete
step lands between the actor's last look at the state and its conditional append, which then
conflicts and re-runs the generator on the newer state (at most ``conflicts`` races per trace).
Preconditions checked *outside* a generator are therefore caught.

**Reduction.** States are hashed canonically: reader ids are interchangeable (the smallest
encoding over every renaming is kept), fencing tokens and generations are replaced by their
rank (the protocol only compares them), timestamps are fixed, and finished checkpoints are
forgotten except the newest completed one (a reset target).

Run deeper with ``make explore`` (``python -m tests.support.explorer --depth N``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from readergroup.admin.group_manager import plan_checkpoint
from readergroup.admin.group_member import GroupMember
from readergroup.core.errors import CheckpointError, ReaderGroupError
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import GroupState, ResetGroup, SegKey, check_invariants, new_group
from readergroup.core.membership import plan_remove
from readergroup.testing.memory_heartbeats import MemoryHeartbeatStore
from statesync.errors import ApplyError
from statesync.replica import apply_updates, split_generator_result

STREAM = "x/s"
S0, S1, SA, SB, SM = ((STREAM, i) for i in range(5))
SEGMENTS = (S0, S1, SA, SB, SM)
NAMES = {S0: "0", S1: "1", SA: "A", SB: "B", SM: "M"}
#: Key space in quarters: 0 = [0, .5), 1 = [.5, 1); 0 splits into A, B; B merges with 1 into M.
QUARTERS: dict[SegKey, frozenset[int]] = {
    S0: frozenset({0, 1}),
    S1: frozenset({2, 3}),
    SA: frozenset({0}),
    SB: frozenset({1}),
    SM: frozenset({1, 2, 3}),
}
PREDECESSORS: dict[SegKey, tuple[SegKey, ...]] = {
    S0: (),
    S1: (),
    SA: (S0,),
    SB: (S0,),
    SM: (SB, S1),
}
SUCCESSORS: dict[SegKey, tuple[SegKey, ...]] = {S0: (SA, SB), S1: (SM,), SA: (), SB: (SM,), SM: ()}
SEALED = frozenset({S0, S1, SB})
LENGTH = 1
"""Events per segment: positions are 0 (nothing read) or 1 (read to the end)."""
READERS = ("r1", "r2", "r3")
SESSION_MS = 10_000
NOW_MS = 1_000


class InvariantViolation(AssertionError):
    """An invariant failed; the message names it and the trace that led there."""


# -- the synchronizer model ---------------------------------------------------------------------
class Log:
    """The shared log: the newest state, its revision, what each entry concerned (statesync's
    conflict keys; ``None``: the whole state), and a race to inject."""

    def __init__(self, state: GroupState) -> None:
        self.state = state
        self.revision = 0
        self.keys: dict[int, frozenset[str] | None] = {}
        self.rival: Callable[[], None] | None = None
        self.raced = False

    def disjoint_since(self, revision: int, keys: frozenset[str] | None) -> bool:
        """Whether every entry after ``revision`` concerns only keys other than ``keys``."""
        if keys is None:
            return False
        for later in range(revision + 1, self.revision + 1):
            touched = self.keys.get(later)
            if touched is None or touched & keys:
                return False
        return True

    def land_rival(self) -> None:
        rival, self.rival = self.rival, None
        if rival is not None:
            rival()
            self.raced = True


class ModelSync:
    """``StateSynchronizer``'s contract in memory: generators run on this replica; an append is
    conditional on the log not having moved (else fetch and re-run) unless every entry since
    concerned other keys than the append's (then it lands after them: its updates must apply
    to the newer state, else the protocol's conflict keys are wrong); a run that appends
    nothing or raises counts only on a replica fetched during the call (or the caller's step:
    ``fetched_at``)."""

    def __init__(self, log: Log) -> None:
        self._log = log
        self._state = log.state
        self._revision = log.revision
        self.name = "group:x/g"

    @property
    def state(self) -> GroupState:
        return self._state

    @property
    def revision(self) -> int:
        return self._revision

    def compact(self) -> None:
        """A snapshot changes no state: nothing to model."""
        self.fetch_updates()

    def fetch_updates(self) -> int:
        moved = self._log.revision - self._revision
        self._state, self._revision = self._log.state, self._log.revision
        return moved

    def update_state(
        self, generator: Callable[[GroupState], Any], *, fetched_at: int | None = None
    ) -> Any:
        fresh = fetched_at is not None and fetched_at == self._revision
        while True:
            try:
                updates, result = split_generator_result(generator(self._state))
            except Exception:
                if fresh or not self.fetch_updates():
                    raise
                fresh = True
                continue
            if not updates:
                if fresh or not self.fetch_updates():
                    return result
                fresh = True
                continue
            try:  # the writer's own check, on its replica
                apply_updates(self._state, updates, self._revision + 1)
            except ApplyError as exc:
                raise ReaderGroupError(f"update rejected: {exc.__cause__}") from exc.__cause__
            self._log.land_rival()  # another actor's append may land first
            keys = _conflict_keys(updates)
            if self._revision != self._log.revision and not self._log.disjoint_since(
                self._revision, keys
            ):
                self.fetch_updates()  # conflict: re-run on the newer state
                fresh = True
                continue
            try:  # lands on the log's newest state (past disjoint entries, if any)
                new_state = apply_updates(self._log.state, updates, self._log.revision + 1)
            except ApplyError as exc:
                raise InvariantViolation(
                    f"an update landed past entries about other keys {sorted(keys or ())} and "
                    f"then failed to apply: {exc.__cause__!r}"
                ) from exc.__cause__
            self._log.state, self._log.revision = new_state, self._log.revision + 1
            self._log.keys[self._log.revision] = keys
            self.fetch_updates()
            return result


def _conflict_keys(updates: Iterable[Any]) -> frozenset[str] | None:
    """statesync's rule: the union of the updates' keys; ``None`` if any concerns everything."""
    keys: set[str] = set()
    for update in updates:
        concern = update.conflict_keys()
        if concern is None:
            return None
        keys.update(concern)
    return frozenset(keys) or None


# -- the world ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    """What one reader process knows (its shell), besides the shared state."""

    alive: bool = False
    generation: int = 0
    owned: tuple[tuple[SegKey, int, int, int], ...] = ()
    """Local segments: ``(segment, token, returned, committed)``."""
    group_generation: int = -1
    """The group generation this reader last absorbed (``-1``: not looked yet)."""


@dataclass(frozen=True)
class World:
    state: GroupState
    slots: Mapping[str, Slot]
    roots: frozenset[SegKey]
    """Segments the group (re)started from: assignable without completed predecessors."""
    checkpoints_made: int = 0
    resets_made: int = 0
    conflicts: int = 0
    trace: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Limits:
    depth: int
    readers: int = 2
    conflicts: int = 1
    checkpoints: int = 1
    resets: int = 1


def initial_world(readers: int) -> World:
    config = ReaderGroupConfig(streams=[STREAM], session_timeout=SESSION_MS / 1000)
    state = new_group("x", "g", config, {S0: 0, S1: 0}, NOW_MS)
    return World(state, {r: Slot() for r in READERS[:readers]}, frozenset({S0, S1}))


class Step:
    """One action of one actor (a reader id, or ``"admin"`` for the administrator and the
    environment: joins, expiries, ``reader_offline``, checkpoints, resets)."""

    def __init__(self, actor: str, name: str, arg: Any = None) -> None:
        self.actor, self.name, self.arg = actor, name, arg

    def label(self) -> str:
        if self.name == "complete_all":
            return f"{self.actor}.complete({'+'.join(NAMES[s] for s in self.arg)})"
        arg = "" if self.arg is None else f"({NAMES.get(self.arg, self.arg)})"
        return f"{self.actor}.{self.name}{arg}"

    @property
    def appends(self) -> bool:
        return self.name not in ("read", "crash")


def _member(log: Log, reader_id: str, slot: Slot) -> GroupMember:
    member = GroupMember(
        ModelSync(log),  # type: ignore[arg-type]
        MemoryHeartbeatStore(lambda: NOW_MS),
        reader_id,
        session_timeout_ms=SESSION_MS,
        max_moves=4,
    )
    member.generation = slot.generation
    member.server_ms = NOW_MS
    return member


def _owned(slot: Slot) -> dict[SegKey, tuple[int, int, int]]:
    return {s: (t, ret, com) for s, t, ret, com in slot.owned}


def _pack(owned: Mapping[SegKey, tuple[int, int, int]]) -> tuple[tuple[SegKey, int, int, int], ...]:
    return tuple(sorted((s, t, r, c) for s, (t, r, c) in owned.items()))


class Runner:
    """Applies steps to a world: the shells of readers and the administrator."""

    def __init__(self, world: World) -> None:
        self.log = Log(world.state)
        self.slots = dict(world.slots)
        self.world = world
        self.checkpoints_made = world.checkpoints_made
        self.resets_made = world.resets_made
        self.roots = world.roots

    # reader shell ---------------------------------------------------------------------------
    def _absorb(self, reader_id: str, member: GroupMember, slot: Slot) -> Slot:
        """Like ``EventStreamReader._absorb_reset``: re-initialize on a new group generation."""
        state = member.refresh()
        if state.generation != slot.group_generation:
            slot = replace(slot, owned=(), group_generation=state.generation)
            if reader_id in state.reset_pending:
                member.ack_reset(state.generation)
        return slot

    def _reconcile(self, reader_id: str, member: GroupMember, slot: Slot) -> Slot:
        """Like ``EventStreamReader._reconcile``: keep what the group gives this reader."""
        mine = member.state.owned_by(reader_id)
        owned = _owned(slot)
        kept = {s: v for s, v in owned.items() if s in mine and mine[s].token == v[0]}
        for s, a in mine.items():
            if s not in kept:
                kept[s] = (a.token, a.position, a.position)
        return replace(slot, owned=_pack(kept))

    def run_reader(self, step: Step) -> None:
        reader_id, slot = step.actor, self.slots[step.actor]
        member = _member(self.log, reader_id, slot)
        owned = _owned(slot)
        if step.name == "crash":
            slot = replace(slot, alive=False)
        elif step.name == "read":
            owned = {s: (t, min(LENGTH, r + 1), c) for s, (t, r, c) in owned.items()}
            slot = replace(slot, owned=_pack(owned))
        elif step.name == "rebalance":
            slot = self._absorb(reader_id, member, slot)
            owned = _owned(slot)
            member.rebalance({s: r for s, (_, r, _) in owned.items()})
            slot = self._reconcile(reader_id, member, slot)
        elif step.name == "commit":
            slot = self._absorb(reader_id, member, slot)
            owned = _owned(slot)
            due = {s: (t, r) for s, (t, r, c) in owned.items() if r > c}
            member.commit(due)
            owned.update({s: (t, r, r) for s, (t, r) in due.items()})
            slot = replace(slot, owned=_pack(owned))
        elif step.name == "complete":
            token, _, _ = owned[step.arg]
            successors = tuple((s, PREDECESSORS[s], 0) for s in SUCCESSORS[step.arg])
            if member.complete(step.arg, token, successors, LENGTH):
                del owned[step.arg]
                slot = replace(slot, owned=_pack(owned))
        elif step.name == "complete_all":  # like _complete_finished: one update for them all
            completions = tuple((s, owned[s][0], LENGTH) for s in step.arg)
            later = sorted({n for s in step.arg for n in SUCCESSORS[s]})
            if member.complete_segments(completions, [(n, PREDECESSORS[n], 0) for n in later]):
                for segment in step.arg:
                    del owned[segment]
                slot = replace(slot, owned=_pack(owned))
        elif step.name == "ack":  # like _rebalance: absorb a reset, then take checkpoints
            slot = self._absorb(reader_id, member, slot)
            owned = _owned(slot)
            member.ack_checkpoint(step.arg, {s: r for s, (_, r, _) in owned.items()})
        elif step.name == "leave":
            member.leave({s: r for s, (_, r, _) in owned.items()})
            slot = Slot()
        else:
            raise ValueError(step.name)
        self.slots[reader_id] = slot

    # administrator and environment ----------------------------------------------------------
    def run_admin(self, step: Step) -> None:
        admin = ModelSync(self.log)
        if step.name == "join":
            member = _member(self.log, step.arg, Slot())
            member.join()
            self.slots[step.arg] = Slot(alive=True, generation=member.generation)
        elif step.name == "expire":  # a live member's heartbeat removes a silent reader
            record = self.log.state.readers[step.arg]
            observer = _member(self.log, "observer", Slot())
            observer.remove_if(step.arg, record.generation)
        elif step.name == "offline":  # ReaderGroup.reader_offline
            admin.update_state(plan_remove(step.arg, None))
        elif step.name == "checkpoint":
            self.checkpoints_made += 1
            admin.update_state(plan_checkpoint(step.arg, NOW_MS))
        elif step.name == "reset":
            self.resets_made += 1
            starts = reset_target(self.log.state)
            admin.update_state(lambda s: [ResetGroup(tuple(sorted(starts.items())))])
            self.roots = frozenset(starts)
        else:
            raise ValueError(step.name)

    def run(self, step: Step) -> None:
        try:
            if step.actor == "admin":
                self.run_admin(step)
            else:
                self.run_reader(step)
        except CheckpointError:
            pass  # refused (too many outstanding): nothing changed
        except ReaderGroupError as exc:
            if step.actor != "admin" and type(exc).__name__ == "ReaderNotInGroupError":
                self.slots[step.actor] = replace(self.slots[step.actor], alive=False)  # fenced

    def world_after(self, trace: str, conflicts: int) -> World:
        return World(
            self.log.state,
            self.slots,
            self.roots,
            self.checkpoints_made,
            self.resets_made,
            conflicts,
            (*self.world.trace, trace),
        )


def reset_target(state: GroupState) -> dict[SegKey, int]:
    """The newest completed checkpoint's positions, else the group's original start."""
    for checkpoint in reversed(state.checkpoints):
        if checkpoint.completed_ms >= 0 and not checkpoint.failed:
            return dict(checkpoint.positions)
    return {S0: 0, S1: 0}


def enabled(world: World, limits: Limits) -> list[Step]:
    state, steps = world.state, []
    for reader_id, slot in sorted(world.slots.items()):
        if not slot.alive:
            if reader_id not in state.readers:
                steps.append(Step("admin", "join", reader_id))
            else:
                steps.append(Step("admin", "expire", reader_id))
            continue
        steps += [Step(reader_id, "rebalance"), Step(reader_id, "leave")]
        if reader_id in state.readers:
            steps.append(Step(reader_id, "crash"))
            steps.append(Step("admin", "offline", reader_id))
        owned = _owned(slot)
        if any(r < LENGTH for _, r, _ in owned.values()):
            steps.append(Step(reader_id, "read"))
        if any(r > c for _, r, c in owned.values()):
            steps.append(Step(reader_id, "commit"))
        finished = [s for s, (_, r, _) in sorted(owned.items()) if s in SEALED and r >= LENGTH]
        steps += [Step(reader_id, "complete", segment) for segment in finished]
        if len(finished) > 1:
            steps.append(Step(reader_id, "complete_all", tuple(finished)))
        for checkpoint in state.checkpoints:
            if not checkpoint.done and reader_id in checkpoint.pending:
                steps.append(Step(reader_id, "ack", checkpoint.name))
    if world.checkpoints_made < limits.checkpoints:
        steps.append(Step("admin", "checkpoint", f"cp{world.checkpoints_made}"))
    if world.resets_made < limits.resets:
        steps.append(Step("admin", "reset"))
    return steps


def successors_of(world: World, limits: Limits) -> Iterable[World]:
    """Every step enabled in ``world``; then (races left) every appending step that first
    loses a race to another actor's step (so the shortest, simplest trace is reported)."""
    steps = enabled(world, limits)
    for step in steps:
        runner = Runner(world)
        runner.run(step)
        yield runner.world_after(step.label(), world.conflicts)
    if world.conflicts >= limits.conflicts:
        return
    for step in steps:
        if not step.appends:
            continue
        for rival in steps:
            if rival is step or rival.actor == step.actor != "admin" or not rival.appends:
                continue  # the administrator's steps come from independent processes
            runner = Runner(world)
            runner.log.rival = lambda runner=runner, rival=rival: runner.run(rival)
            runner.run(step)
            if runner.log.raced:  # the step appended, and lost a race to the rival first
                label = f"{step.label()} [conflict: {rival.label()} landed first]"
                yield runner.world_after(label, world.conflicts + 1)


# -- invariants ---------------------------------------------------------------------------------
def _cover(segments: Iterable[SegKey]) -> tuple[bool, str]:
    quarters: list[int] = []
    for segment in segments:
        quarters += QUARTERS[segment]
    if sorted(quarters) == [0, 1, 2, 3]:
        return True, ""
    return False, f"{sorted(NAMES[s] for s in segments)} covers quarters {sorted(quarters)}"


def check_world(before: World, after: World) -> None:
    """Raise :class:`InvariantViolation` unless ``after`` (reached from ``before``) is sound."""
    state, trace = after.state, after.trace

    def fail(what: str) -> None:
        steps = "\n".join(f"  {i + 1}. {s}" for i, s in enumerate(trace))
        raise InvariantViolation(f"{what}\ntrace:\n{steps}")

    try:
        check_invariants(state)  # every segment in one place, tokens unique, owners online
    except AssertionError as exc:
        fail(f"state invariant: {exc}")
    for segment in (*state.assigned, *state.unassigned):
        if segment in after.roots:
            continue
        missing = [NAMES[p] for p in PREDECESSORS[segment] if p not in state.completed]
        if missing:
            fail(f"successor {NAMES[segment]} assignable before predecessors {missing} completed")
    covers, why = _cover(state.positions())
    if not covers:
        fail(f"a segment was lost: the group's positions (its stream cut) do not cover: {why}")
    for checkpoint in state.checkpoints:
        if checkpoint.failed:
            continue
        if not checkpoint.done:
            pending_owned = [s for s, a in state.assigned.items() if a.reader in checkpoint.pending]
            covers, why = _cover({*checkpoint.positions, *pending_owned})
            if not covers:
                fail(f"checkpoint {checkpoint.name} can no longer cover the key space: {why}")
            continue
        covers, why = _cover(checkpoint.positions)
        if not covers:
            fail(f"completed checkpoint {checkpoint.name} does not cover the key space: {why}")
        old = before.state.checkpoint(checkpoint.name)
        for segment, position in checkpoint.positions.items():
            recorded_now = old is None or segment not in old.positions
            committed = before.state.assigned.get(segment)
            if recorded_now and committed is not None and position < committed.position:
                fail(f"checkpoint {checkpoint.name} points before a committed position")
    for reader_id in state.reset_pending:
        if state.owned_by(reader_id):
            fail(f"{reader_id} owns segments before acknowledging the reset")
    for reader_id, slot in after.slots.items():
        record = state.readers.get(reader_id)
        online = slot.alive and record is not None and record.generation == slot.generation
        if online and state.owned_by(reader_id) and slot.group_generation != state.generation:
            fail(f"{reader_id} owns segments but skipped reset generation {state.generation}")
        for segment, token, _, _ in slot.owned if slot.alive else ():
            owner = state.assigned.get(segment)
            if owner is not None and owner.token == token and owner.reader != reader_id:
                fail(f"{reader_id} and {owner.reader} both own {NAMES[segment]}")
    if state.next_token < before.state.next_token:
        fail("the fencing token counter went back")
    for segment, assignment in state.assigned.items():
        old = before.state.assigned.get(segment)
        if (old is None or old.token != assignment.token) and (
            assignment.token < before.state.next_token
        ):
            fail(f"{NAMES[segment]} got fencing token {assignment.token}, not a new one")


# -- canonical hashing --------------------------------------------------------------------------
def _ranks(values: Iterable[int]) -> dict[int, int]:
    return {v: i for i, v in enumerate(sorted(set(values)))}


def canonical(world: World) -> tuple[Any, ...]:
    """A key equal for worlds that differ only by reader names, token and generation values,
    timestamps, checkpoint names and finished checkpoints other than the reset target.

    Symmetry of readers: each reader is described by everything the world says about it
    (its shell, its record, what it owns, which checkpoints and reset await it); readers are
    named by the rank of their description, so renamings of one world get one key.
    """
    state = world.state
    tokens = _ranks(
        [state.next_token, *(a.token for a in state.assigned.values())]
        + [t for slot in world.slots.values() for _, t, _, _ in slot.owned]
    )
    generations = _ranks(
        [state.next_generation, *(r.generation for r in state.readers.values())]
        + [slot.generation for slot in world.slots.values()]
    )
    group_generations = _ranks(
        [state.generation, *(slot.group_generation for slot in world.slots.values())]
    )
    outstanding = [c for c in state.checkpoints if not c.done]
    owned_in_state: dict[str, list[tuple[SegKey, int, int]]] = {}
    for segment, a in sorted(state.assigned.items()):
        owned_in_state.setdefault(a.reader, []).append((segment, a.position, tokens[a.token]))
    descriptions = []
    for reader_id, slot in world.slots.items():
        record = state.readers.get(reader_id)
        descriptions.append(
            (
                slot.alive,
                generations[slot.generation],
                tuple((s, tokens[t], ret, com) for s, t, ret, com in slot.owned),
                group_generations[slot.group_generation],
                -1 if record is None else generations[record.generation],
                tuple(owned_in_state.get(reader_id, ())),
                tuple(reader_id in c.pending for c in outstanding),
                reader_id in state.reset_pending,
            )
        )
    return (
        tuple(sorted(descriptions)),
        tuple(sorted(state.unassigned.items())),
        tuple(sorted(state.future.items())),
        tuple(sorted(state.completed)),
        tuple(sorted((s, tuple(sorted(e.items()))) for s, e in state.waiting_ends.items())),
        tokens[state.next_token],
        generations[state.next_generation],
        group_generations[state.generation],
        tuple(tuple(sorted(c.positions.items())) for c in outstanding),
        tuple(sorted(reset_target(state).items())),
        world.roots,
        world.checkpoints_made,
        world.resets_made,
    )


# -- search -------------------------------------------------------------------------------------
@dataclass
class Report:
    depth: int
    states: int
    transitions: int
    seconds: float
    per_depth: list[int]


def explore(limits: Limits, *, deadline_s: float | None = None) -> Report:
    """Breadth-first over every interleaving up to ``limits.depth`` steps; raise
    :class:`InvariantViolation` (with the shortest trace) at the first unsound state."""
    began = time.monotonic()
    root = initial_world(limits.readers)
    seen = {canonical(root): 0}
    """Canonical state -> fewest races used to reach it (fewer races leave more to explore)."""
    frontier = [root]
    per_depth = [1]
    transitions = 0
    for _ in range(limits.depth):
        following: list[World] = []
        for world in frontier:
            for after in successors_of(world, limits):
                transitions += 1
                check_world(world, after)
                key = canonical(after)
                if seen.get(key, limits.conflicts + 1) > after.conflicts:
                    seen[key] = after.conflicts
                    following.append(after)
            if deadline_s is not None and time.monotonic() - began > deadline_s:
                raise TimeoutError(f"exploration exceeded {deadline_s}s")
        per_depth.append(len(following))
        frontier = following
        if not frontier:
            break
    return Report(limits.depth, len(seen), transitions, time.monotonic() - began, per_depth)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=7)
    parser.add_argument("--readers", type=int, default=2, choices=(1, 2, 3))
    parser.add_argument("--conflicts", type=int, default=1)
    parser.add_argument("--checkpoints", type=int, default=1)
    parser.add_argument("--resets", type=int, default=1)
    args = parser.parse_args(argv)
    limits = Limits(args.depth, args.readers, args.conflicts, args.checkpoints, args.resets)
    try:
        report = explore(limits)
    except InvariantViolation as exc:
        print(f"INVARIANT VIOLATED: {exc}")
        return 1
    print(
        f"{limits}: {report.states} distinct states, {report.transitions} transitions, "
        f"{report.seconds:.1f}s; new states per depth {report.per_depth}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
