"""``AsyncGroupMember``: a reader's membership in a group for asyncio code, on an
:class:`~statesync.AsyncStateSynchronizer` and an
:class:`~readergroup.storage.aio_heartbeat_store.AsyncHeartbeatStore`.

Every decision is :class:`~readergroup.admin.group_member.MemberSteps`' (the threaded
:class:`~readergroup.admin.group_member.GroupMember` runs the same steps blocking): this shell
only awaits their I/O. The group log's format is negotiated on the announcements the heartbeat
task last read (:class:`CachedAnnouncements`): the synchronizer asks for it without awaiting,
and a member missing from that copy counts as one not announced yet, so the older format
(which every member reads) is written until the next read shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from readergroup.admin.group_member import Liveness, MemberSteps
from readergroup.core.errors import ReaderGroupError
from readergroup.core.group_state import NO_LAG, GroupState, SegKey
from readergroup.core.log_format import NEWEST_FORMAT, negotiated_format
from readergroup.storage.aio_calls import awaited, drive_async
from readergroup.storage.format_negotiation import NegotiatedFormat


class CachedAnnouncements:
    """The readers' announced log formats as last read by :meth:`refresh` (awaited), for a
    :class:`NegotiatedFormat` that must not wait."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.announced: dict[str, tuple[int, int, int]] = {}
        self._newest_for: tuple[object, object] | None = None
        """The members (``state.readers``) and the copy last found all to read the newest
        format: while both are the same objects, the check (over every member) is not made
        again (persistent maps: an unchanged group keeps its ``readers``)."""

    async def refresh(self, state: GroupState | None = None) -> None:
        """Read the announcements again (an unreadable hash keeps the copy); with ``state``,
        only if some member of it is not known to read the newest format (an idle group whose
        members all announced it reads nothing, and checks its members once, not on every
        heartbeat)."""
        if state is not None:
            seen = (state.readers, self.announced)
            if self._newest_for is not None and all(
                a is b for a, b in zip(seen, self._newest_for, strict=True)
            ):
                return
            if negotiated_format(state.readers, self.announced) == NEWEST_FORMAT:
                self._newest_for = seen
                return
        try:
            self.announced = await self._store.announcements()
        except ReaderGroupError:
            return

    def announcements(self) -> dict[str, tuple[int, int, int]]:
        return self.announced


class AsyncGroupMember(MemberSteps):
    """A reader's actions on the group state, awaited (see :class:`MemberSteps`). The tasks of
    one event loop may call any method (the synchronizer serializes them)."""

    def __init__(
        self,
        sync: Any,
        heartbeats: Any,
        reader_id: str,
        *,
        announcements: CachedAnnouncements | None = None,
        **limits: Any,
    ) -> None:
        """``limits``: :class:`MemberSteps`' ``session_timeout_ms``, ``max_moves`` and
        ``judge_every_ms``; ``announcements``: the copy the group synchronizer's format is
        negotiated on too."""
        self.announcements = announcements or CachedAnnouncements(heartbeats)
        self._announced_for: object = None
        """The members map whose every reader the announcements' copy holds (see
        :meth:`commit`)."""
        log_format = NegotiatedFormat(self.announcements)  # type: ignore[arg-type]
        super().__init__(sync, heartbeats, reader_id, log_format=log_format, **limits)

    refresh = awaited(MemberSteps.refresh_steps)
    leave = awaited(MemberSteps.leave_steps)
    rebalance = awaited(MemberSteps.rebalance_steps)
    ack_checkpoint = awaited(MemberSteps.ack_checkpoint_steps)
    ack_reset = awaited(MemberSteps.ack_reset_steps)
    rewind = awaited(MemberSteps.rewind_steps)
    complete_segments = awaited(MemberSteps.complete_segments_steps)

    async def join(self, *, takeover: bool = False) -> int:
        """See :meth:`MemberSteps.join_steps` (then reads the announced formats)."""
        generation = await drive_async(self.join_steps(takeover=takeover), self)
        await self.announcements.refresh()
        return generation

    async def commit(
        self,
        positions: Mapping[SegKey, tuple[int, int]],
        epochs: Mapping[SegKey, int] | None = None,
        lag: int = NO_LAG,
    ) -> None:
        """See :meth:`MemberSteps.commit_steps` (first reads the announced formats when the
        state has a member the copy lacks: the lag is reported only while every member reads
        the newest format, and a reader that joined since the last heartbeat kept it out; a
        round trip once per change of members, none in a steady group)."""
        readers = self.state.readers
        if readers is not self._announced_for:
            if any(reader not in self.announcements.announced for reader in readers):
                await self.announcements.refresh()
            if all(reader in self.announcements.announced for reader in readers):
                self._announced_for = readers
        await drive_async(self.commit_steps(positions, epochs, lag), self)

    async def heartbeat(self, *, judge: bool = False) -> Liveness:
        """See :meth:`MemberSteps.heartbeat_steps` (then reads the announced formats, while
        some member is not known to read the newest)."""
        liveness = await drive_async(self.heartbeat_steps(judge=judge), self)
        await self.announcements.refresh(self.state)
        return liveness
