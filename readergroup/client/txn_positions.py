"""Consume-transform-produce: a reader group's positions committed with a transaction's output
(Kafka's ``sendOffsetsToTransaction`` with its fencing of a partition's previous owner).

Where the positions live, atomically with the decision: the output stream's *consumed
positions* hash (``{txn:<out scope>/<out stream>}:consumed``, on the same slot as the
decision), one field per reader group and input segment
(``"<group sync name>@<group created ms>|<scope>/<stream>/<seg>"``, :func:`group_of`):
``"v2 <reset generation> <fencing token> <position> <txn id>"`` (``consumed.lua``). A claim
is ordered by (the group's reset generation, :func:`reset_generation`, fencing token): after
``reset_reader_group`` the readers start from the reset's positions, not from where
transactions before the reset left them, and a reader from before the reset is refused.

* A commit with positions (``txn.commit(reader=...)``/``send_positions``) first checks
  locally that the reader owns each input segment, then its decision (``txn_stage.lua``)
  refuses and aborts the transaction if a later claim is on any of them (another reader
  acquired it since, or the group was reset):
  :class:`~readergroup.core.errors.TransactionPositionsError`, nothing lands.
  Otherwise the decision writes the positions in the same script.
* A bound reader (:func:`bind_reader`) that acquires a segment claims it with its token
  (``txn_claim.lua``) before any event of it is handed out, completes the decided
  transaction named there if it is still committing, and seeks past what it consumed. So a
  decision either lands before the claim (the new owner resumes after it) or is refused
  (the new owner reads those events and produces their output itself): each input event's
  output is committed exactly once.
* The group's own positions (what lag figures and readers outside the pipeline use) are
  then committed by the committing reader as usual (:func:`mirror_positions_steps`); if it
  lost the segment meanwhile, the next owner's claim carries the position instead.

Everything that does I/O here is call steps (:mod:`readergroup.core.calls`) on the writer's
store and completer and on the reader (a threaded
:class:`~readergroup.client.reader.EventStreamReader` or an asyncio
:class:`~readergroup.aio.reader.AsyncEventStreamReader`, whose ``commit`` is awaited): the
threaded writer drives them blocking (:class:`Claimer`, :func:`bind_reader`), the asyncio one
awaits them (:class:`~readergroup.aio.transactions.AsyncClaimer`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from readergroup.core.calls import Steps, call_on, drive
from readergroup.core.errors import (
    InvalidConfigError,
    ReaderGroupError,
    SegmentNotOwnedError,
    TransactionPositionsError,
)
from readergroup.core.group_state import SegKey
from readergroup.core.transactions import TxnStatus, encode_positions

if TYPE_CHECKING:
    from readergroup.client.txn_steps import TxnWriterCore

logger = logging.getLogger(__name__)

Reader = Any
"""A reader of the pipeline's input: threaded or asyncio (the same synchronous accessors,
``owned_segments``, ``position``, ``seek``, ``committed``, ``_member``; ``commit`` blocking or
awaited)."""


@dataclass(frozen=True, slots=True)
class PositionsClaim:
    """What a decision with consumed positions carries."""

    positions: dict[SegKey, int]
    text: str  # JSON stored in the record
    group_sync: str
    claims: tuple[tuple[str, int, int], ...]  # (input segment field, fencing token, position)
    generation: int  # the group's reset generation the reader read them under


def segment_field(segment: SegKey) -> str:
    """An input segment's field in the consumed positions hash."""
    return f"{segment[0]}/{segment[1]}"


def group_of(reader: Reader) -> str:
    """The reader's group: its synchronizer's name (unique across scopes) and when it was
    created (server ms), so that a group deleted and created again under the same name,
    whose fencing tokens start at 1 again, neither inherits the old group's positions nor is
    refused by its higher tokens."""
    member = reader._member
    return f"{member.sync.name}@{member.state.created_ms}"


def reset_generation(reader: Reader) -> int:
    """The group's reset generation the reader reads under (bumped by every reset of the
    group: a claim of a later one outranks any fencing token of an earlier one)."""
    generation: int = reader._member.state.generation
    return generation


def positions_claim(
    writer: TxnWriterCore[Any], reader: Reader, positions: Mapping[SegKey, int] | None
) -> PositionsClaim:
    """The claim committing ``positions`` of ``reader`` makes (default: the position of every
    segment it holds). Raises :class:`TransactionPositionsError` when the reader gave up or
    lost a segment since its last commit through this writer (events handed out of it would
    be committed without their position), or when ``positions`` name a segment it does not
    own."""
    claimer = writer._claimers.get(id(reader))
    if claimer is None:
        raise ReaderGroupError(
            f"reader {reader.reader_id!r} is not bound to transactional writer "
            f"{writer.transactional_id!r}: call writer.bind_reader(reader) once, right after "
            "creating it"
        )
    owned = reader.owned_segments()
    gone = set(claimer.dropped) | {k for k, t in claimer.held.items() if owned.get(k) != t}
    chosen = dict(positions) if positions is not None else {}
    if positions is None:
        if gone:
            raise TransactionPositionsError(
                f"reader {reader.reader_id!r} gave up or lost {sorted(gone)} since its last "
                "commit; nothing committed"
            )
        chosen = {k: reader.position(k) for k in claimer.held}
    lost = sorted(k for k in chosen if k not in owned or k in gone)
    if lost:
        raise TransactionPositionsError(
            f"reader {reader.reader_id!r} does not own {lost} any more; nothing committed"
        )
    group = group_of(reader)
    claims = tuple((segment_field(k), owned[k], p) for k, p in sorted(chosen.items()))
    text = encode_positions(chosen, {"group": group, "reader": reader.reader_id})
    return PositionsClaim(chosen, text, group, claims, reset_generation(reader))


def committed(writer: TxnWriterCore[Any], reader: Reader) -> None:
    """A commit with ``reader``'s positions landed: start counting drops afresh."""
    claimer = writer._claimers.get(id(reader))
    if claimer is not None:
        claimer.dropped.clear()


def rewind_steps(writer: TxnWriterCore[Any], reader: Reader) -> Steps[None]:
    """A commit with ``reader``'s positions failed: hand out again, from where committed
    transactions (or the group) left each owned segment, the events whose output it lost."""
    claimer = writer._claimers.get(id(reader))
    if claimer is None:
        return
    owned = reader.owned_segments()
    if owned:
        found = yield call_on(
            writer.store,
            "claim",
            group_of(reader),
            reset_generation(reader),
            [(segment_field(k), t) for k, t in owned.items()],
        )
        group = reader.committed()
        behind: dict[SegKey, int] = {}
        for (segment, _), (position, txn_id) in zip(owned.items(), found, strict=True):
            yield from complete_decided_steps(writer, txn_id)  # it lands before what this
            # reader commits next
            if position > group.get(segment, 0):
                behind[segment] = position
            target = max(position, group.get(segment, 0))
            try:
                if reader.position(segment) != target:  # back; forward after a failed claim
                    logger.warning(
                        "reader %r: its transaction failed; %s resumes at %d",
                        reader.reader_id,
                        segment,
                        target,
                    )
                    reader.seek(segment, target)
            except SegmentNotOwnedError as exc:  # its next owner starts from what was committed
                logger.warning(
                    "reader %r: %s went meanwhile; not rewound",
                    reader.reader_id,
                    segment,
                    exc_info=exc,
                )
        if behind:  # the group's positions follow (their commit after the decision was lost)
            yield from mirror_positions_steps(reader, behind)
    claimer.held = dict(owned)
    claimer.dropped.clear()


def complete_decided_steps(writer: TxnWriterCore[Any], txn_id: str) -> Steps[None]:
    """Complete ``txn_id`` (named in the consumed positions, ``""``: none) if it is still
    committing: a reader resuming after its positions commits nothing before it lands."""
    if txn_id:
        record = yield call_on(writer.store, "record", txn_id)
        if record is not None and record.status is TxnStatus.COMMITTING:
            yield from writer.completer.complete_steps(record)


def mirror_positions_steps(reader: Reader, positions: Mapping[SegKey, int]) -> Steps[None]:
    """Commit the decided positions to the reader's group too (best effort: the consumed
    positions hash already holds them for the next owner)."""
    try:
        yield call_on(reader, "commit", positions)
    except ReaderGroupError as exc:
        logger.warning(
            "reader %r: committing transaction positions to the group failed (the next owner "
            "resumes from the transaction's record): %s",
            reader.reader_id,
            exc,
            exc_info=exc,
        )


class ClaimSteps:
    """The decisions of the rebalance listener binding a reader to a writer (see
    :func:`bind_steps`): claiming what the reader acquires, steps; what it gives up, no I/O."""

    def __init__(self, writer: TxnWriterCore[Any], reader: Reader) -> None:
        self._writer = writer
        self._reader = reader
        self.held: dict[SegKey, int] = {}  # segment -> token, as claimed on acquisition
        self.dropped: set[SegKey] = set()  # given up or lost since the last commit
        self.generation = reset_generation(reader)  # the group's, as of the last acquisition

    def acquired_steps(self, reader_id: str, segments: Sequence[SegKey]) -> Steps[None]:
        reader = self._reader
        owned = reader.owned_segments()
        mine = [k for k in segments if k in owned]
        if not mine:
            return
        generation = reset_generation(reader)
        if generation != self.generation:
            # the group was reset: it starts over from the reset's positions, so what was
            # handed out before and not committed is given up by the reset, not lost
            self.generation = generation
            self.dropped.clear()
        for segment in mine:
            self.held[segment] = owned[segment]
        try:
            yield from self._claim(reader_id, mine, owned)
        except ReaderGroupError:
            # not claimed, or not resumed after what was decided: the next commit fails, and
            # its rewind claims them and moves them where they belong
            self.dropped.update(mine)
            raise

    def _claim(
        self, reader_id: str, mine: list[SegKey], owned: Mapping[SegKey, int]
    ) -> Steps[None]:
        reader, writer = self._reader, self._writer
        claims = [(segment_field(k), owned[k]) for k in mine]
        found = yield call_on(
            writer.store, "claim", group_of(reader), reset_generation(reader), claims
        )
        group = reader.committed()
        behind: dict[SegKey, int] = {}
        for segment, (position, txn_id) in zip(mine, found, strict=True):
            yield from complete_decided_steps(writer, txn_id)
            if position > reader.position(segment):
                logger.info(
                    "reader %r: %s resumes at %d, after transaction %s",
                    reader_id,
                    segment,
                    position,
                    txn_id,
                )
                reader.seek(segment, position)
            if position > group.get(segment, 0):
                behind[segment] = position
        if behind:  # the group's positions follow (their commit after the decision was lost)
            yield from mirror_positions_steps(reader, behind)

    def on_segments_released(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        # a segment completed (read to its end, which manual mode does once the end is
        # committed) is given to nobody: its output landed, nothing of it comes again
        completed = self._reader._member.state.completed
        self._drop([k for k in segments if k not in completed])
        for segment in segments:
            self.held.pop(segment, None)

    def on_segments_lost(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        self._drop(segments)

    def _drop(self, segments: Sequence[SegKey]) -> None:
        for segment in segments:
            if self.held.pop(segment, None) is not None:
                self.dropped.add(segment)


class Claimer(ClaimSteps):
    """The rebalance listener :func:`bind_reader` installs on a threaded reader."""

    def on_segments_acquired(self, reader_id: str, segments: Sequence[SegKey]) -> None:
        drive(self.acquired_steps(reader_id, segments))


def bind_steps(writer: TxnWriterCore[Any], reader: Reader, claimer: ClaimSteps) -> Steps[None]:
    """Install ``claimer`` (a listener made for ``reader``) unless the reader is bound, and
    claim what the reader holds already (see :meth:`TransactionalEventStreamWriter.bind_reader
    <readergroup.client.transactions.TransactionalEventStreamWriter.bind_reader>`)."""
    if id(reader) in writer._claimers:
        return
    if reader.commit_mode != "manual":
        raise InvalidConfigError(
            f"reader {reader.reader_id!r}: a consume-transform-produce group commits only with "
            "its transactions: create it with ReaderGroupConfig(commit_mode='manual')"
        )
    writer._claimers[id(reader)] = claimer
    reader.add_rebalance_listener(claimer)
    owned = reader.owned_segments()
    if owned:  # segments acquired before binding: claim them now
        yield from claimer.acquired_steps(reader.reader_id, list(owned))


def bind_reader(writer: TxnWriterCore[Any], reader: Reader) -> None:
    """See :meth:`TransactionalEventStreamWriter.bind_reader
    <readergroup.client.transactions.TransactionalEventStreamWriter.bind_reader>`."""
    drive(bind_steps(writer, reader, Claimer(writer, reader)))
