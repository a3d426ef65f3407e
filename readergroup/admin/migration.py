"""One-shot migration of the old shared catalog to per-scope catalogs (``readergroup admin
migrate``). Run it once, as the operator role, after upgrading; it is idempotent.

The old layout kept every scope's streams and groups in one ``catalog`` synchronizer that every
scope's admin could write, so one scope could make another lose data. The migration copies each
scope's entries into that scope's own catalog and lists the scope, then deletes the old catalog.
Groups that read streams of another scope keep working for their readers, but that scope's
retention no longer knows them: they are reported so they can be recreated in the stream's scope.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from readergroup.admin.stream_manager import StreamManager
from readergroup.core import catalog
from readergroup.core.errors import NoLegacyCatalogError
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


def migrate_catalog(manager: StreamManager, *, dry_run: bool = False) -> Migration:
    """Copy the old shared catalog into per-scope catalogs, list the scopes, delete it."""
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
    if dry_run:
        return Migration(True, scopes, cross)
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
    return Migration(True, scopes, cross)
