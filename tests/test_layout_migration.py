"""``readergroup admin migrate``: the old shared catalog becomes per-scope catalogs, once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from readergroup import (
    LegacyLayoutError,
    ReaderGroupConfig,
    ReaderGroupManager,
    RetentionManager,
    ScopeNotFoundError,
    StreamManager,
)
from readergroup.admin.group_manager import join_group
from readergroup.cli import main
from readergroup.core import catalog
from readergroup.core.names import LEGACY_CATALOG_SYNC_NAME, SCOPES_SYNC_NAME, catalog_sync_name
from readergroup.storage import vanished
from readergroup.storage.connection import RedisConnection


def old_layout(url: str, scope: str, other: str) -> None:
    """Streams and groups as the old layout left them: metadata per stream and group, and one
    shared catalog (written here with the old update types), no per-scope catalogs."""
    with StreamManager.from_url(url) as sm:
        for name in (scope, other):
            sm.create_scope(name)
            sm.create_stream(name, "s")
    with ReaderGroupManager.from_url(scope, url) as rgm:
        rgm.create_reader_group("g", ReaderGroupConfig(streams=[f"{scope}/s"]))
    connection = RedisConnection.from_url(url)
    for name in (scope, other):
        connection.synchronizer(catalog_sync_name(name), catalog.UPDATE_TYPES).delete()
    connection.synchronizer(SCOPES_SYNC_NAME, catalog.SCOPE_LIST_UPDATE_TYPES).delete()
    for name in (scope, other, None):  # nor the records of what was created (issue 13)
        connection.client.delete(vanished.record_key(connection, name))
    old = connection.synchronizer(LEGACY_CATALOG_SYNC_NAME, catalog.LEGACY_UPDATE_TYPES)
    old.initialize(catalog.EMPTY_LEGACY_CATALOG)
    v1: dict[str, Any] = {t.type_name: t for t in catalog.LEGACY_UPDATE_TYPES}  # type: ignore[attr-defined]
    old.update_state_unconditionally(
        [
            v1["CreateScope"](scope),
            v1["CreateScope"](other),
            v1["AddStream"](scope, "s", 1),
            v1["AddStream"](other, "s", 2),
            v1["AddGroup"](scope, "g", 3, (f"{scope}/s",)),
            v1["AddGroup"](scope, "cross", 4, (f"{scope}/s", f"{other}/s")),
            v1["AddGroup"](scope, "gone", 5, (f"{scope}/s",)),
            v1["RemoveGroup"](scope, "gone"),
        ]
    )
    connection.close()


def test_migrate_moves_the_shared_catalog_once(private_redis: Any) -> None:
    url = private_redis.url
    old_layout(url, "m1", "m2")
    with StreamManager.from_url(url) as sm, pytest.raises(ScopeNotFoundError, match="migrate"):
        sm.list_streams("m1")  # the old layout is refused with a clear message
    runner = CliRunner()
    plan = runner.invoke(main, ["admin", "migrate", "--dry-run", "--json", "--redis-url", url])
    assert plan.exit_code == 0, plan.output
    assert '"m1"' in plan.output and "cross -> m2/s" in plan.output
    with StreamManager.from_url(url) as sm, pytest.raises(ScopeNotFoundError):
        sm.list_streams("m1")  # a dry run changes nothing
    done = runner.invoke(main, ["admin", "migrate", "--redis-url", url])
    assert done.exit_code == 0, done.output
    assert "migrated 2 scopes" in done.output and "cross -> m2/s" in done.output
    with StreamManager.from_url(url) as sm:
        assert sm.list_scopes() == ["m1", "m2"]
        assert sm.list_streams("m1") == ["s"] and sm.list_streams("m2") == ["s"]
        assert catalog.subscribers_of(sm.catalog("m1"), "s") == ["cross", "g"]
        assert "group:m1/g" in RetentionManager(sm).subscriber_cuts("m1", "s")
        connection = sm.connection
        assert not connection.client.exists(f"rg:{{{LEGACY_CATALOG_SYNC_NAME}}}:meta")
    with ReaderGroupManager.from_url("m1", url) as rgm:
        assert rgm.list_reader_groups() == ["cross", "g"]
    again = runner.invoke(main, ["admin", "migrate", "--redis-url", url])
    assert again.exit_code == 0 and "nothing to migrate" in again.output


def test_migrate_is_refused_while_a_reader_of_an_older_version_is_online(
    private_redis: Any,
) -> None:
    """Readers of versions before per-scope catalogs find their group through the old one:
    the migration names the online readers that announced no current log format and stops,
    unless forced; readers of this version are not named."""
    url = private_redis.url
    old_layout(url, "m1", "m2")
    connection = RedisConnection.from_url(url)
    old, _ = join_group(connection, "m1", "g", "old-reader")
    old.heartbeats.withdraw("old-reader", old.generation)  # as a previous version leaves it
    join_group(connection, "m1", "g", "new-reader")
    runner = CliRunner()
    refused = runner.invoke(main, ["admin", "migrate", "--redis-url", url])
    assert refused.exit_code != 0
    assert "OlderReadersOnlineError" in refused.output and "m1/g: old-reader" in refused.output
    assert "new-reader" not in refused.output
    with StreamManager.from_url(url) as sm, pytest.raises(ScopeNotFoundError):
        sm.list_streams("m1")  # nothing was migrated
    plan = runner.invoke(main, ["admin", "migrate", "--dry-run", "--json", "--redis-url", url])
    assert json.loads(plan.output)["older_readers_online"] == {"m1/g": ["old-reader"]}
    forced = runner.invoke(main, ["admin", "migrate", "--force", "--redis-url", url])
    assert forced.exit_code == 0 and "migrated 2 scopes" in forced.output
    connection.close()


def test_scope_list_on_the_old_layout_says_to_migrate(private_redis: Any) -> None:
    url = private_redis.url
    old_layout(url, "m1", "m2")
    with StreamManager.from_url(url) as sm, pytest.raises(LegacyLayoutError, match="migrate"):
        sm.list_scopes()
    runner = CliRunner()
    for extra in ([], ["--json"]):
        listed = runner.invoke(main, ["scope", "list", "--redis-url", url, *extra])
        assert listed.exit_code == 1, listed.output
        assert "readergroup admin migrate" in listed.output and "LegacyLayoutError" in listed.output
    assert runner.invoke(main, ["admin", "migrate", "--redis-url", url]).exit_code == 0
    listed = runner.invoke(main, ["scope", "list", "--redis-url", url, "--json"])
    assert listed.exit_code == 0 and '"m1"' in listed.output and '"m2"' in listed.output
