"""Heartbeats that went back (a failover promoted a replica that missed the latest beats) or
could not be written for a session must not get live readers removed (issue 18: the reader
removed across a Sentinel failover). The real GroupMember on the in-memory backends, a fake
clock."""

from __future__ import annotations

import copy

from readergroup.admin.group_member import GroupMember
from tests.support.group_sim import SESSION_MS, GroupSimulation


def members(sim: GroupSimulation, *names: str) -> dict[str, GroupMember]:
    for name in names:
        sim.join(name)
    return {name: sim.readers[name].member for name in names}


def beat_for(sim: GroupSimulation, group: dict[str, GroupMember], ms: int, step: int = 500) -> None:
    for _ in range(ms // step):
        sim.clock.advance(step / 1000)
        for member in group.values():
            member.heartbeat()


def test_heartbeats_that_went_back_remove_no_live_reader() -> None:
    sim = GroupSimulation(seed=1)
    group = members(sim, "a", "b", "c")
    beat_for(sim, group, 2_000)
    promoted = copy.deepcopy(sim.heartbeats._beats)  # what a lagging replica has
    beat_for(sim, group, SESSION_MS + 2_000)  # the old primary keeps taking beats
    sim.heartbeats._beats = promoted  # the failover: every beat is a session and more old
    del group["c"]  # c died during the failover
    sim.clock.advance(0.1)
    assert group["a"].heartbeat().removed == ()  # a is first on the new primary
    beat_for(sim, group, SESSION_MS - 1_000)
    assert set(sim.state().readers) == {"a", "b", "c"}  # nobody removed within the grace
    beat_for(sim, group, 2_000)
    assert set(sim.state().readers) == {"a", "b"}  # then the dead one is


def test_an_outage_longer_than_a_session_removes_no_live_reader() -> None:
    sim = GroupSimulation(seed=2)
    group = members(sim, "a", "b")
    beat_for(sim, group, 2_000)
    sim.clock.advance(SESSION_MS / 1000 + 5)  # nobody could reach Redis
    assert group["a"].heartbeat().removed == ()
    beat_for(sim, group, 2 * SESSION_MS)
    assert set(sim.state().readers) == {"a", "b"}
