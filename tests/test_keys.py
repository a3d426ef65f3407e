"""KeyLayout: every key of a scope matches that scope's ACL patterns and no other scope's, and
the keys a script touches together share one hash tag (one cluster slot). Pure."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from readergroup.core.names import catalog_sync_name, group_sync_name
from readergroup.storage.keys import KeyLayout

LAYOUT = KeyLayout("rg")


def keys_of_scope(scope: str) -> list[str]:
    """Every key readergroup (not statesync) builds for one stream and group of ``scope``."""
    group = group_sync_name(scope, "g")
    return [
        *LAYOUT.segment(scope, "s", 3),
        LAYOUT.heartbeats(group),
        LAYOUT.reader_clients(group),
        LAYOUT.created_record(scope),
        LAYOUT.subscribers(scope, "s"),
        LAYOUT.staging(scope, "s", "job", 3, "p0"),
        LAYOUT.staged_jobs(scope, "s"),
    ]


def hash_tag(key: str) -> str:
    match = re.search(r"\{([^}]*)\}", key)
    assert match, key
    return match.group(1)


def test_every_key_of_a_scope_matches_its_patterns_and_no_other_scopes() -> None:
    for scope, other in (("a", "ab"), ("ab", "a"), ("shop", "shop2")):
        mine = LAYOUT.scope_patterns(scope).values()
        theirs = LAYOUT.scope_patterns(other).values()
        for key in keys_of_scope(scope):
            assert any(fnmatchcase(key, p) for p in mine), key
            assert not any(fnmatchcase(key, p) for p in theirs), (key, other)
            assert fnmatchcase(key, LAYOUT.everything())


def test_keys_used_together_share_a_hash_tag() -> None:
    assert len({hash_tag(k) for k in LAYOUT.segment("a", "s", 7)}) == 1
    group = group_sync_name("a", "g")
    assert hash_tag(LAYOUT.heartbeats(group)) == hash_tag(LAYOUT.reader_clients(group)) == group
    assert hash_tag(LAYOUT.created_record("a")) == catalog_sync_name("a")
    assert hash_tag(LAYOUT.staging("a", "s", "j", 1, "p")) == hash_tag(LAYOUT.staged_jobs("a", "s"))
    assert hash_tag(LAYOUT.segment("a", "s", 1).meta) != hash_tag(LAYOUT.segment("a", "s", 2).meta)
