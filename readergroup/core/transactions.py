"""Transactions: the states, transitions and guarantees, and the pure parts (records, commit
plans). Pure.

The design follows Pravega's ``TransactionalEventStreamWriter`` (a transaction's events go to
transaction segments that the controller merges into their parents on commit, or drops on
abort; ``getTxn``, ``checkStatus``, a lease that aborts a transaction left open) and Kafka's
transactions (a ``transactional.id`` whose *epoch* each new producer instance bumps, fencing
the older ones; a commit decision recorded first, then completed; offsets committed with the
output, ``sendOffsetsToTransaction``). Here Redis plays the controller, Lua scripts the
atomic steps, and any client the completer.

Keys (all of one stream's transactions share the hash tag ``{txn:<scope>/<stream>}``, so
every control step is one script on one slot, on Redis Cluster too; see
:class:`readergroup.storage.keys.KeyLayout`):

* ``...:t:<txn id>``: the transaction's record (hash): ``v`` (format, 1), ``state``, ``tid``
  (the transactional id owning it) and ``epoch`` (that id's epoch it was begun or resumed
  under), ``created``/``deadline``/``finished`` (server ms), ``lease`` (ms), ``events``,
  ``bytes``; from the decision on ``plan`` (JSON, :class:`CommitPlan`), ``pv`` (the plan's
  version), ``positions`` (JSON, consume-transform-produce), ``decided`` (server ms); a
  merge's target ``sources`` (JSON ids) and ``cursor``, a merged source ``merged`` (target);
* ``...:s:<txn id>``: its staged events (list: one msgpack item per stage call,
  :func:`readergroup.storage.txn_store.pack_events`), in write order;
* ``...:open``: sorted set of the transactions not finished (id -> server ms by which it
  must be finished: an OPEN one's lease deadline, a COMMITTING one's completion deadline);
* ``...:all``: sorted set of every transaction whose record may exist (id -> created, then
  finished, server ms), so deleting the stream deletes every key without a keyspace scan;
* ``...:epochs``: hash of transactional id -> current epoch;
* ``...:consumed``: consume-transform-produce positions, per reader group incarnation (its
  name and creation time) and input segment: ``"v2 <reset generation> <fencing token>
  <position> <txn id>"`` (format 2; format 1 had no reset generation and reads as 0;
  :mod:`readergroup.client.txn_positions`, ``consumed.lua``);
* ``...:landed``: committed transactions' plan entries (``"<segment>|<writer id>"`` ->
  finished server ms): the sweep deletes their fields from the segments' writer tables once
  older than ``retention`` (a completer working longer than 30 s re-reads the record before
  appending more, so no replay comes after that).

Expiry without any client: an OPEN record and its staging list carry a Redis TTL of deadline
+ ``retention`` (renewed with the lease; removed by the decision), a finished record one of
``retention``.

States and transitions (each one script, atomic; ``S`` the server clock)::

    (none) --begin--> OPEN --stage (renews lease)--> OPEN --resume (get_txn)--> OPEN
    OPEN --decide--> COMMITTING --complete (any client)--> COMMITTED
    OPEN --abort / expiry (S > deadline) / decide refused (positions) / merge--> ABORTED
    (none) --merge of open transactions (the Spark sink's job)--> MERGING
    MERGING --merge step (bounded; any retry of the job resumes)--> MERGING --last step--> OPEN
    MERGING --abort / expiry (S > deadline)--> ABORTED

``ABORTING`` is never stored: an abort is one atomic step (record ABORTED, staged list
deleted), so no transaction rests between the two. ``COMMITTED`` and ``ABORTED`` records are
kept ``retention`` ms (then expire) so ``status()`` and ``get_txn`` answer after the end.

* **begin** (``txn_begin.lua``): the caller's epoch must be its transactional id's current
  one (else FENCED); writes the OPEN record with ``deadline = S + lease``.
* **stage** (``txn_stage.lua``): events are appended to the staging list, never to a segment.
  Only while OPEN (else CLOSED with the state), by the epoch that owns the record, and while
  that epoch is still its id's current one (else FENCED), before the deadline (else the
  script aborts the transaction itself and answers EXPIRED). Each stage renews the lease;
  staging nothing is a lease renewal.
* **decide** (``txn_stage.lua`` with ``decide``): the same checks, then the last events are
  staged and the record becomes COMMITTING with the commit plan (which segment gets which
  staged events, in order, routed by key on the stream's segments *at commit time*) and the
  consumed positions, if any. The plan must cover exactly the staged events (``events`` must
  match, else CONFLICT). With consumed positions each input segment is claimed in
  ``...:consumed`` under the reader's (group reset generation, fencing token); a later claim
  there (a later owner, or any reader after a reset of the group) aborts the transaction
  instead (POSITIONS). This is the commit point: from here the
  transaction is committed, whoever completes it.
* **complete** (Python, :mod:`readergroup.client.transactions`): per plan entry, appends
  of at most :data:`ENTRY_CHUNK` events to its segment under the writer id
  ``txn:<id>:<entry tag>``, sequences 1, 2, ...: the segment's writer table makes a replay a
  no-op (DUPLICATE), so completing twice, or by two clients at once, writes each event once.
  The chunks of an entry whose segment was sealed (the stream scaled after the decision) and
  does not hold them (its writer table says how many it took; a sealed segment changes no
  more) are re-routed to the segments current now, as new entries (``txn_replan.lua``,
  compare-and-set on ``pv``: completers agree on one plan; one that finds the transaction
  COMMITTED meanwhile stops there).
  Then ``txn_finish.lua``: COMMITTED, the staged list deleted, the entries indexed in
  ``...:landed``. Whoever finds a transaction COMMITTING completes it: the committing writer,
  ``get_txn``/``status()`` of any writer, the sweeper, ``readergroup txn list``, a reader
  claiming a segment it names.
* **abort** (``txn_finish.lua``): OPEN -> ABORTED by the owning epoch (or forced by an
  operator, or by the sweeper past the deadline); the staged list deleted. A COMMITTING or
  COMMITTED transaction cannot be aborted (CLOSED).
* **resume** (``txn_adopt.lua``, ``get_txn``): an OPEN transaction before its deadline is
  taken over by the caller's transactional id and epoch; the instance that held it is fenced
  from it. A closed one is returned as it is (its status).
* **merge** (``txn_merge.lua``): open transactions held by the caller become one new
  transaction (their staged events in order; they end ABORTED), once: the target's id names
  the job, so a second merge finds it. The work is cut in steps so that no script call blocks
  Redis for a large job (a copy of 430 MB in one call blocked it for seconds): the first step
  checks the sources (open, held by the caller's transactional id at its current epoch, within
  their lease) and, atomically, begins the target MERGING (field ``sources``: their ids,
  ``cursor``: the source being moved) and ends the sources ABORTED (``merged``: the target),
  keeping their staging lists for the target; every step then *moves* (``LPOP``/``RPUSH``) at
  most :data:`MERGE_STEP_ITEMS` staging items (:data:`MERGE_STEP_BYTES`) from the front of the
  sources' lists to the back of the target's, in order, renewing the target's lease and the
  TTLs of the lists not moved yet; the last step makes it OPEN, an ordinary transaction. Each
  item moves once (a step is atomic: an item is in exactly one list), so a driver dying
  between steps loses and duplicates nothing: a retry of the job's commit finds the target
  MERGING and resumes it with the stored sources (a newer epoch of the same transactional id
  takes it over, fencing the older driver). A MERGING target accepts no stage and no
  decision (CLOSED), so none of the job's rows is visible before the last step and its
  commit. Past its deadline it is aborted (by the next step, or the sweeper; lists not moved
  yet then go with their TTL). The Spark sink's tasks stage in transactions of their own; its
  driver merges and commits them (:mod:`readergroup.spark.txn_sink`).
* **claim** (``txn_claim.lua``): a reader that acquired input segments raises their claim to
  its (group reset generation, fencing token) and learns where decided transactions of its
  reset generation left them (:mod:`readergroup.client.txn_positions`). Claims are ordered
  by generation first: a group reset (``ResetGroup`` bumps the group's ``generation``) makes
  its readers start from the reset's positions, not from positions stored before the reset
  (a claim of an earlier generation is replaced, its position dropped), and a reader from
  before the reset is refused whatever its token.
* **sweep**: transactions of ``...:open`` past their deadline: OPEN and MERGING ones are
  aborted, COMMITTING ones completed; ``...:landed`` entries older than the retention leave
  the writer tables. It needs no live writer (any client may run it: writers do on ``begin``
  now and then, the CLI); and even with no client at all, expiry is enforced by the scripts
  (a record past its deadline accepts no stage and no decision) and the records and staging
  lists carry Redis TTLs, so nothing stays.

Guarantees:

* **Isolation.** No read path sees an event of an OPEN, MERGING or ABORTED transaction: they
  are only ever in staging lists, which no reader, batch client, Spark source or lag figure
  reads.
* **All or nothing.** Once decided, every event is appended exactly once (idempotent
  entries; re-routing only entries a sealed segment never took); a committer dying between
  segments leaves a COMMITTING record which the next client that finds it completes. Before
  the decision nothing is in any segment.
* **Per-key order.** One routing key's events are in one plan entry (routed by key), in write
  order, appended after everything already in the segment; an entry re-routed off a sealed
  segment lands in its successors, which readers read after the whole predecessor.
* **Zombie fencing.** A new writer instance bumps its transactional id's epoch (``epochs``);
  stage and decide check that the caller holds the record (``"<epoch>:<transactional id>"``)
  and that the epoch is still its id's current one, so an older instance's pending commit
  fails with :class:`TransactionFencedError` and lands nothing.
* **Consume-transform-produce.** The positions are claimed in the decision itself (same
  slot): a reader that lost an input segment to a later owner cannot decide, and the later
  owner, claiming first, resumes after whatever was decided before its claim. Each input
  event's output is committed once. The group's own positions follow (committed by the
  reader after the commit; the next owner's claim carries them if that fails).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from readergroup.core.errors import InvalidConfigError, ReaderGroupError

RECORD_FORMAT = 1
"""Version of the record layout (field ``v``); a reader of a later one refuses it."""

MERGE_STEP_ITEMS = 16
"""The most staging items (one stage call's events each: the Spark sink stages 1,000 rows per
item) one ``txn_merge.lua`` call moves, so no merge blocks Redis for a whole job."""
MERGE_STEP_BYTES = 4 << 20
"""The most bytes one ``txn_merge.lua`` call moves (an item larger than that moves alone)."""

ENTRY_CHUNK = 1000
"""Events per append of a plan entry (the plain writer's default ``max_batch_events``), so
no completion blocks Redis for a whole entry: chunk ``k`` (from 1) of an entry, its
``indexes[(k - 1) * ENTRY_CHUNK : k * ENTRY_CHUNK]``, is appended under sequence ``k`` of the
entry's writer id. Part of the plan's format: completers must agree on it."""


class TxnStatus(enum.Enum):
    """Where a transaction is (Pravega's ``Transaction.Status``)."""

    OPEN = "OPEN"
    MERGING = "MERGING"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


_LEASED = (TxnStatus.OPEN, TxnStatus.MERGING)
"""States that end ABORTED past their deadline."""


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """Staged events (``indexes`` into the staging list, in order) bound for one segment,
    appended under the writer id ``txn:<txn id>:<tag>``."""

    tag: int
    segment: int
    indexes: tuple[int, ...]

    @property
    def chunks(self) -> int:
        """How many appends it takes (see :data:`ENTRY_CHUNK`)."""
        return -(-len(self.indexes) // ENTRY_CHUNK)


@dataclass(frozen=True, slots=True)
class CommitPlan:
    """Which segment gets which staged events. ``next_tag``: the tag a new entry takes."""

    entries: tuple[PlanEntry, ...]
    next_tag: int

    @classmethod
    def route(cls, segments: Sequence[int]) -> CommitPlan:
        """The plan of staged events ``0..n-1`` whose segments are ``segments`` (in order)."""
        by_segment: dict[int, list[int]] = {}
        for index, segment in enumerate(segments):
            by_segment.setdefault(segment, []).append(index)
        entries = tuple(
            PlanEntry(tag, segment, tuple(indexes))
            for tag, (segment, indexes) in enumerate(sorted(by_segment.items()))
        )
        return cls(entries, len(entries))

    def rerouted(self, tag: int, segments: Mapping[int, int], landed: int = 0) -> CommitPlan:
        """This plan with entry ``tag`` replaced by entries for the segments its events go to
        now (``segments``: staged index -> segment), each keeping the events' order; the
        entry keeps its first ``landed`` chunks (appended before its segment was sealed)."""
        old = next(e for e in self.entries if e.tag == tag)
        cut = landed * ENTRY_CHUNK
        by_segment: dict[int, list[int]] = {}
        for index in old.indexes[cut:]:
            by_segment.setdefault(segments[index], []).append(index)
        kept = [
            e if e.tag != tag else PlanEntry(tag, e.segment, e.indexes[:cut])
            for e in self.entries
            if e.tag != tag or cut > 0
        ]
        new = [
            PlanEntry(self.next_tag + i, segment, tuple(indexes))
            for i, (segment, indexes) in enumerate(sorted(by_segment.items()))
        ]
        return CommitPlan(tuple(kept + new), self.next_tag + len(new))

    def to_json(self) -> str:
        return json.dumps(
            {"n": self.next_tag, "e": [[e.tag, e.segment, list(e.indexes)] for e in self.entries]},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> CommitPlan:
        data = json.loads(text)
        return cls(tuple(PlanEntry(t, s, tuple(i)) for t, s, i in data["e"]), int(data["n"]))


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A transaction's record as stored (see the module docstring)."""

    txn_id: str
    status: TxnStatus
    transactional_id: str
    epoch: int
    created_ms: int
    deadline_ms: int
    lease_ms: int
    events: int
    size: int
    plan: CommitPlan | None = None
    plan_version: int = 0
    positions: str = ""
    decided_ms: int = 0
    finished_ms: int = 0

    @classmethod
    def from_hash(cls, txn_id: str, fields: Mapping[Any, Any]) -> TxnRecord:
        text = {_text(k): _text(v) for k, v in fields.items()}
        version = int(text.get("v", "1"))
        if version > RECORD_FORMAT:
            raise ReaderGroupError(
                f"transaction {txn_id}: record format {version} is newer than this client's "
                f"({RECORD_FORMAT}); upgrade readergroup"
            )
        try:
            status = TxnStatus(text["state"])
            plan = CommitPlan.from_json(text["plan"]) if text.get("plan") else None
            return cls(
                txn_id=txn_id,
                status=status,
                transactional_id=text.get("tid", ""),
                epoch=int(text.get("epoch", "0")),
                created_ms=int(text.get("created", "0")),
                deadline_ms=int(text.get("deadline", "0")),
                lease_ms=int(text.get("lease", "0")),
                events=int(text.get("events", "0")),
                size=int(text.get("bytes", "0")),
                plan=plan,
                plan_version=int(text.get("pv", "0")),
                positions=text.get("positions", ""),
                decided_ms=int(text.get("decided", "0")),
                finished_ms=int(text.get("finished", "0")),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise ReaderGroupError(
                f"transaction {txn_id}: unreadable record ({exc!r}): {sorted(text)}"
            ) from exc

    def effective_status(self, now_ms: int) -> TxnStatus:
        """The status, counting an OPEN record past its deadline as ABORTED (the scripts
        refuse it everything; the sweeper only has not recorded it yet)."""
        if self.status in _LEASED and now_ms > self.deadline_ms:
            return TxnStatus.ABORTED
        return self.status


def encode_positions(positions: Mapping[tuple[str, int], int], extra: Mapping[str, Any]) -> str:
    """Consume-transform-produce positions (``(scoped stream, segment) -> position``) and
    what identifies the reader that consumed them, as stored in a decision."""
    return json.dumps(
        {"p": [[s, seg, pos] for (s, seg), pos in sorted(positions.items())], **extra},
        separators=(",", ":"),
    )


def decode_positions(text: str) -> tuple[dict[tuple[str, int], int], dict[str, Any]]:
    data = json.loads(text)
    positions = {(s, int(seg)): int(pos) for s, seg, pos in data.pop("p")}
    return positions, data


def validate_transactional_id(value: str) -> str:
    """A transactional id: 1-200 characters, none of them a control character."""
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        raise InvalidConfigError("transactional_id must be a string of 1..200 characters")
    if any(ord(c) < 32 for c in value):
        raise InvalidConfigError("transactional_id must not contain control characters")
    return value


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
