"""One-shot migration of the old shared catalog to per-scope catalogs (``readergroup admin
migrate``). Run it once, as the operator role, after upgrading; it is idempotent.

It is refused (:class:`~readergroup.core.errors.OlderReadersOnlineError`, naming them) while a
reader of an older version is online in a group it moves: versions before the per-scope
catalogs find their group through the old catalog, which the migration deletes. ``force``
migrates all the same.

The old layout kept every scope's streams and groups in one ``catalog`` synchronizer that every
scope's admin could write, so one scope could make another lose data. The migration copies each
scope's entries into that scope's own catalog and lists the scope, then deletes the old catalog.
Groups that read streams of another scope keep working for their readers, but that scope's
retention no longer knows them: they are reported so they can be recreated in the stream's scope.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from readergroup.admin.group_manager import ReaderGroup
from readergroup.admin.stream_manager import StreamManager
from readergroup.core import catalog
from readergroup.core.errors import (
    NoLegacyCatalogError,
    OlderReadersOnlineError,
    ReaderGroupNotFoundError,
)
from readergroup.core.names import LEGACY_CATALOG_SYNC_NAME
from readergroup.storage.translate import fetch_state, translate_errors
from statesync import Decision, Update

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Migration:
    """What :func:`migrate_catalog` did (or would do, with ``dry_run``)."""

    found: bool
    """An old catalog existed."""
    scopes: dict[str, tuple[int, int]]
    """scope -> (streams, reader groups) copied into its own catalog."""
    cross_scope: dict[str, list[str]]
    """scope -> ``"group -> scope/stream"`` reads no longer protected by retention."""
    older_readers: dict[str, list[str]] = field(default_factory=dict)
    """``scope/group`` -> its online readers of an older version (see the module doc)."""


def older_readers_online(manager: StreamManager, state: catalog.Catalog) -> dict[str, list[str]]:
    """``scope/group`` -> online readers of an older version, for the groups of the old
    catalog ``state`` (groups whose state is gone are left out)."""
    found: dict[str, list[str]] = {}
    for scope, groups in sorted(state.get("groups", {}).items()):
        for group in sorted(groups):
            try:
                older = ReaderGroup(manager.connection, scope, group).older_readers_online()
            except ReaderGroupNotFoundError:
                continue
            if older:
                found[f"{scope}/{group}"] = older
    return found


def migrate_catalog(
    manager: StreamManager, *, dry_run: bool = False, force: bool = False
) -> Migration:
    """Copy the old shared catalog into per-scope catalogs, list the scopes, delete it.
    Refused while readers of an older version are online in its groups, unless ``force``."""
    legacy = manager.connection.synchronizer(LEGACY_CATALOG_SYNC_NAME, catalog.LEGACY_UPDATE_TYPES)
    try:
        state: catalog.Catalog = fetch_state(
            legacy, lambda: NoLegacyCatalogError("no old catalog"), "read the old catalog"
        )
    except NoLegacyCatalogError:
        return Migration(False, {}, {})
    split = catalog.split_legacy(state)
    scopes = {
        scope: (len(catalog.streams_of(new)), len(catalog.groups_of(new)))
        for scope, (new, _) in split.items()
    }
    cross = {scope: reads for scope, (_, reads) in split.items() if reads}
    older = older_readers_online(manager, state)
    if dry_run:
        return Migration(True, scopes, cross, older)
    if older and not force:
        named = "; ".join(f"{group}: {', '.join(readers)}" for group, readers in older.items())
        raise OlderReadersOnlineError(
            f"readers of an older version are online ({named}); they find their group through "
            "the old catalog, which the migration deletes: upgrade or stop them first, or force "
            "the migration"
        )
    if older:
        logger.warning("migrating with readers of an older version online: %s", older)
    for scope, (new, _) in sorted(split.items()):
        manager.create_scope(scope)

        def merge(current: catalog.Catalog, new: catalog.Catalog = new) -> Decision[None]:
            have_streams, have_groups = catalog.streams_of(current), catalog.groups_of(current)
            updates: list[Update] = [
                catalog.AddStream(s, t)
                for s, t in sorted(catalog.streams_of(new).items())
                if s not in have_streams
            ]
            updates += [
                catalog.AddGroup(g, t, tuple(new["group_streams"].get(g, ())))
                for g, t in sorted(catalog.groups_of(new).items())
                if g not in have_groups
            ]
            return updates, None

        manager.update_catalog(scope, merge)
        logger.info("migrated scope %s: %s streams, %s reader groups", scope, *scopes[scope])
    for scope, reads in cross.items():
        logger.warning("scope %s: groups read other scopes' streams: %s", scope, reads)
    with translate_errors("delete the old catalog"):
        legacy.delete()
    return Migration(True, scopes, cross, older)
