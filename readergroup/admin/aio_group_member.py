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

from collections.abc import Mapping, Sequence
from typing import Any

from readergroup.admin.group_member import Liveness, MemberSteps
from readergroup.core.calls import drive_async
from readergroup.core.errors import ReaderGroupError
from readergroup.core.group_state import NO_LAG, Assignment, GroupState, SegKey
from readergroup.core.log_format import NEWEST_FORMAT, negotiated_format
from readergroup.storage.format_negotiation import NegotiatedFormat


class CachedAnnouncements:
    """The readers' announced log formats as last read by :meth:`refresh` (awaited), for a
    :class:`NegotiatedFormat` that must not wait."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.announced: dict[str, tuple[int, int, int]] = {}

    async def refresh(self, state: GroupState | None = None) -> None:
        """Read the announcements again (an unreadable hash keeps the copy); with ``state``,
        only if some member of it is not known to read the newest format (an idle group whose
        members all announced it reads nothing)."""
        if state is not None and negotiated_format(state.readers, self.announced) == NEWEST_FORMAT:
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
        session_timeout_ms: int,
        max_moves: int,
        judge_every_ms: int | None = None,
        announcements: CachedAnnouncements | None = None,
    ) -> None:
        self.announcements = announcements or CachedAnnouncements(heartbeats)
        super().__init__(
            sync,
            heartbeats,
            reader_id,
            session_timeout_ms=session_timeout_ms,
            max_moves=max_moves,
            judge_every_ms=judge_every_ms,
            log_format=NegotiatedFormat(self.announcements),  # type: ignore[arg-type]
        )

    async def refresh(self) -> GroupState:
        return await drive_async(self.refresh_steps(), self)

    async def join(self, *, takeover: bool = False) -> int:
        """See :meth:`MemberSteps.join_steps`."""
        generation = await drive_async(self.join_steps(takeover=takeover), self)
        await self.announcements.refresh()
        return generation

    async def heartbeat(self, *, judge: bool = False) -> Liveness:
        """See :meth:`MemberSteps.heartbeat_steps` (and reads the announced formats again)."""
        liveness = await drive_async(self.heartbeat_steps(judge=judge), self)
        await self.announcements.refresh(self.state)
        return liveness

    async def leave(
        self,
        positions: Mapping[SegKey, int] | None = None,
        epochs: Mapping[SegKey, int] | None = None,
    ) -> bool:
        """See :meth:`MemberSteps.leave_steps`."""
        return await drive_async(self.leave_steps(positions, epochs), self)

    async def rebalance(
        self,
        release_positions: Mapping[SegKey, int],
        *,
        fetched_at: int | None = None,
        only_listed: bool = False,
        release_epochs: Mapping[SegKey, int] | None = None,
        lag: int = NO_LAG,
    ) -> tuple[dict[SegKey, Assignment], list[SegKey]]:
        """See :meth:`MemberSteps.rebalance_steps`."""
        steps = self.rebalance_steps(
            release_positions,
            fetched_at=fetched_at,
            only_listed=only_listed,
            release_epochs=release_epochs,
            lag=lag,
        )
        return await drive_async(steps, self)

    async def ack_checkpoint(self, name: str, positions: Mapping[SegKey, int]) -> None:
        await drive_async(self.ack_checkpoint_steps(name, positions), self)

    async def ack_reset(self, group_generation: int) -> None:
        await drive_async(self.ack_reset_steps(group_generation), self)

    async def commit(
        self,
        positions: Mapping[SegKey, tuple[int, int]],
        epochs: Mapping[SegKey, int] | None = None,
        lag: int = NO_LAG,
    ) -> None:
        """See :meth:`MemberSteps.commit_steps`."""
        await drive_async(self.commit_steps(positions, epochs, lag), self)

    async def rewind(self, rewinds: Mapping[SegKey, tuple[int, int, int]]) -> None:
        await drive_async(self.rewind_steps(rewinds), self)

    async def complete_segments(
        self,
        completions: Sequence[tuple[SegKey, int, int]],
        successors: Sequence[tuple[SegKey, tuple[SegKey, ...], int]],
    ) -> bool:
        return await drive_async(self.complete_segments_steps(completions, successors), self)
