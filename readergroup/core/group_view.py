"""How a reader group looks to an operator (pure code): its members with their heartbeat ages,
and one state word like Kafka's consumer-group states.

* ``stable``: readers online, every segment owned, no reset waiting for acknowledgements;
* ``rebalancing``: readers online but segments are unowned, a reset is being acknowledged, or a
  member's heartbeat is older than the session timeout (it is about to be removed);
* ``empty``: no reader online; the group keeps its positions;
* ``dead``: no reader online and nothing left to read: every stream it reads was deleted, or a
  bounded group reached its end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from readergroup.core.group_state import GroupState, SegKey
from readergroup.core.log_format import UNANNOUNCED_FORMAT, Announcements, member_format

GROUP_STATES = ("stable", "rebalancing", "empty", "dead")


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member: its segments, the age of its last heartbeat (server clock; ``None`` if it
    never beat in this generation), and whether that age exceeds the session timeout."""

    reader: str
    generation: int
    joined_ms: int
    client: str | None
    """``host/pid`` the reader runs on, as it registered when it joined."""
    segments: tuple[SegKey, ...]
    heartbeat_age_ms: int | None
    stale: bool
    log_format: int = UNANNOUNCED_FORMAT
    """The newest group log format the member announced (see
    :mod:`~readergroup.core.log_format`): below :data:`NEWEST_FORMAT`, an older version."""


def members_of(
    state: GroupState,
    beats: Mapping[str, tuple[int, int]],
    clients: Mapping[str, str],
    now_ms: int,
    announced: Announcements | None = None,
) -> list[MemberView]:
    """Every member of ``state`` with its heartbeat age from ``beats`` (reader ->
    ``(generation, server ms)``) at server time ``now_ms``, and the log format it
    ``announced``."""
    timeout_ms = int(state.config.session_timeout * 1000)
    owned: dict[str, list[SegKey]] = {r: [] for r in state.readers}
    for segment, assignment in sorted(state.assigned.items()):
        owned.setdefault(assignment.reader, []).append(segment)
    members = []
    for reader, record in sorted(state.readers.items()):
        beat = beats.get(reader)
        age = now_ms - beat[1] if beat is not None and beat[0] == record.generation else None
        members.append(
            MemberView(
                reader,
                record.generation,
                record.joined_ms,
                clients.get(reader),
                tuple(owned.get(reader, ())),
                age,
                age is None or age > timeout_ms,
                member_format(record, announced or {}),
            )
        )
    return members


def group_state_word(
    state: GroupState, members: Sequence[MemberView], missing_streams: Sequence[str]
) -> str:
    """One of :data:`GROUP_STATES` (see the module docstring)."""
    online = [m for m in members if not m.stale]
    if not online:
        gone = len(set(missing_streams)) >= len(state.config.streams)
        return "dead" if gone or state.end_of_data else "empty"
    if state.unassigned or state.reset_pending or len(online) < len(members):
        return "rebalancing"
    return "stable"
