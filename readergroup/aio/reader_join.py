"""Joining a reader group from asyncio code: :func:`join_group`, the asyncio twin of
:func:`readergroup.admin.group_manager.join_group` (the same steps: the host/pid record, the
group's configuration, :meth:`~readergroup.admin.group_member.MemberSteps.join_steps`)."""

from __future__ import annotations

import logging
import os
import platform

from readergroup.admin.aio_group_member import AsyncGroupMember, CachedAnnouncements
from readergroup.core.errors import ReaderGroupError, ReaderGroupNotFoundError
from readergroup.core.group_config import ReaderGroupConfig
from readergroup.core.group_state import STATE_TYPES, UPDATE_TYPES
from readergroup.core.names import group_sync_name, validate_name
from readergroup.storage.aio_reader_connection import AsyncReaderConnection
from readergroup.storage.format_negotiation import NegotiatedFormat
from readergroup.storage.translate import missing_as, translate_errors

logger = logging.getLogger(__name__)


async def join_group(
    connection: AsyncReaderConnection,
    scope: str,
    group: str,
    reader_id: str,
    *,
    takeover: bool = False,
) -> tuple[AsyncGroupMember, ReaderGroupConfig]:
    """Join ``reader_id`` to ``scope/group``; its member handle and the group config
    (``takeover``: see :meth:`~readergroup.admin.group_member.MemberSteps.join_steps`). Raises
    :class:`ReaderGroupNotFoundError` if the group does not exist."""
    validate_name(reader_id, "reader id")
    name = group_sync_name(scope, group)
    heartbeats = connection.heartbeat_store(name)
    announcements = CachedAnnouncements(heartbeats)
    sync = connection.synchronizer(
        name,
        UPDATE_TYPES,
        STATE_TYPES,
        writer_label=reader_id,
        entry_version=NegotiatedFormat(announcements),  # type: ignore[arg-type]
    )
    with missing_as(
        lambda: ReaderGroupNotFoundError(f"reader group {scope}/{group} does not exist"),
        "read group",
    ):
        await sync.follow()
    try:  # informational (describe --members): a failure must not stop the reader joining
        await heartbeats.register(reader_id, f"{platform.node()}/{os.getpid()}")
    except ReaderGroupError as exc:
        logger.warning("reader %s: could not record its host/pid: %s", reader_id, exc)
    with translate_errors("join"):
        config: ReaderGroupConfig = sync.state.config
        member = AsyncGroupMember(
            sync,
            heartbeats,
            reader_id,
            session_timeout_ms=int(config.session_timeout * 1000),
            max_moves=config.max_segment_moves,
            judge_every_ms=int(config.heartbeat_interval * 1000),
            announcements=announcements,
        )
        await member.join(takeover=takeover)
    return member, config
