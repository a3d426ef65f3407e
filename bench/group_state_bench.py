"""Group-state cost at scale (issue 15): applying one log entry, and a snapshot's encoding.

Pure code on one core, no Redis: the cost every reader pays per group-log entry it applies and
per snapshot it reads, whatever the server.

* ``apply``: microseconds per entry for the entries readers append most (acquire one segment,
  release one, commit four positions, a reader joining), on a group of S segments owned by
  R readers with the owner index built (as every reader has it). ``baseline_copy_us`` is, in
  the same run, what one copy of the segment maps costs (``dict(assigned)``,
  ``dict(unassigned)``): the O(S) part an apply paid when it copied the maps.
* ``snapshot``: milliseconds to encode and decode the group's snapshot with the group's codec,
  beside the generic per-dataclass encoding of the same state in the same run (format 1:
  every dataclass and tuple its own msgpack extension), and the encoded sizes; also a decode
  followed by what a joining reader reads first (``counts()``, its own share), and the encoding
  of a state that was itself decoded from a snapshot (a reader compacting the log).

Usage: ``python bench/group_state_bench.py [--sizes 1024,16384] [--readers 64]``. Prints JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import emit, median
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import (
    STATE_TYPES,
    UPDATE_TYPES,
    AcquireSegments,
    AddReader,
    CommitPositions,
    CreateCheckpoint,
    GroupState,
    ReleaseSegments,
    new_group,
)
from statesync.codec import Codec, TypeRegistry

STREAM = "bench/stream"


def owned_group(segments: int, readers: int) -> GroupState:
    """``segments`` segments shared evenly by ``readers`` readers, positions committed."""
    config = ReaderGroupConfig(streams=[STREAM])
    state = new_group("bench", "g", config, {(STREAM, s): 0 for s in range(segments)}, 1)
    ids = [f"reader-{r:04d}" for r in range(readers)]
    for reader_id in ids:
        state = AddReader(reader_id, 1).apply_to(state)
    for r, reader_id in enumerate(ids):
        generation = state.readers[reader_id].generation
        mine = tuple((STREAM, s) for s in range(r, segments, readers))
        state = AcquireSegments(reader_id, generation, mine, 2).apply_to(state)
        commits = tuple((k, state.assigned[k].token, 100 + k[1]) for k in mine)
        state = CommitPositions(reader_id, generation, commits).apply_to(state)
    state.owners()  # every reader has the index built
    return state


def per_call_us(action: Callable[[], Any], repeat: int) -> float:
    """Median over 5 rounds of CPU time per call (process time: steadier than wall time on
    a shared machine; the code measured does no I/O)."""
    rounds = []
    for _ in range(5):
        began = time.process_time()
        for _ in range(repeat):
            action()
        rounds.append((time.process_time() - began) / repeat * 1e6)
    return round(median(rounds), 2)


def apply_costs(state: GroupState, repeat: int) -> dict[str, float]:
    reader_id = next(iter(state.readers))
    generation = state.readers[reader_id].generation
    mine = sorted(state.owners()[reader_id])
    key = mine[0]
    token = state.assigned[key].token
    release = ReleaseSegments(reader_id, generation, ((key, token, 500),))
    released = release.apply_to(state)
    acquire = AcquireSegments(reader_id, generation, (key,), 3)
    commits = tuple((k, state.assigned[k].token, 200) for k in mine[:4])
    commit = CommitPositions(reader_id, generation, commits)
    join = AddReader("newcomer", 3)
    assigned, unassigned = dict(state.assigned.items()), dict(state.unassigned.items())
    return {
        "acquire_1_us": per_call_us(lambda: acquire.apply_to(released), repeat),
        "release_1_us": per_call_us(lambda: release.apply_to(state), repeat),
        "commit_4_us": per_call_us(lambda: commit.apply_to(state), repeat),
        "add_reader_us": per_call_us(lambda: join.apply_to(state), repeat),
        "baseline_copy_us": per_call_us(lambda: (dict(assigned), dict(unassigned)), repeat),
    }


def snapshot_costs(state: GroupState, repeat: int) -> dict[str, Any]:
    codec = Codec(TypeRegistry([*UPDATE_TYPES, *STATE_TYPES]))
    old = codec.generic()  # format 1: what every snapshot was before
    out: dict[str, Any] = {}
    for label, chosen in (("", codec), ("baseline_format1_", old)):
        data = chosen.encode_snapshot(7, 8, state)
        decoded = chosen.decode_snapshot(data).state
        assert decoded == state, "snapshot did not round-trip"
        out[f"{label}encode_ms"] = round(
            per_call_us(lambda c=chosen: c.encode_snapshot(7, 8, state), repeat) / 1000, 2
        )
        out[f"{label}decode_ms"] = round(
            per_call_us(lambda c=chosen, d=data: c.decode_snapshot(d), repeat) / 1000, 2
        )
        out[f"{label}bytes"] = len(data)
    # what a reader joining pays: the snapshot decoded, then its balance inputs (the counts
    # and its own share); and a compaction by a reader whose state came from a snapshot
    reader_id = next(iter(state.readers))
    data = codec.encode_snapshot(7, 8, state)
    decoded = codec.decode_snapshot(data).state

    def joining() -> None:
        joined = codec.decode_snapshot(data).state
        joined.counts()
        joined.owned_by(reader_id)

    out["decode_counts_own_share_ms"] = round(per_call_us(joining, repeat) / 1000, 2)
    out["encode_decoded_ms"] = round(
        per_call_us(lambda: codec.encode_snapshot(7, 8, decoded), repeat) / 1000, 2
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1024,16384")
    parser.add_argument("--readers", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        state = owned_group(size, args.readers)
        with_checkpoint = CreateCheckpoint("cp", 5).apply_to(state)
        results[f"S={size}"] = {
            "readers": args.readers,
            "apply": apply_costs(state, args.repeat),
            "snapshot": snapshot_costs(state, max(3, args.repeat // 100)),
            "snapshot_with_checkpoint": snapshot_costs(with_checkpoint, max(3, args.repeat // 100)),
        }
    emit("group_state", results)


if __name__ == "__main__":
    main()
