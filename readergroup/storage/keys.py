"""Every Redis key readergroup owns, built in one place: :class:`KeyLayout`. Pure.

``prefix`` is ``ClientConfig.key_prefix``. Braces mark the Redis Cluster hash tag: keys that a
script or a transaction touches together share one, so they share a slot.

* a segment, one hash tag per segment ``<prefix>:{<scope>/<stream>/<segment id>}``:

  * ``...:events``: stream; event at offset *o* has id ``<o + 1>-0`` and fields ``k``
    (routing key, if any), ``p`` (payload), ``w`` (writer ms), ``t`` (server ms), ``b`` (byte
    offset in the segment);
  * ``...:meta``: hash of ``created_ms``, ``sealed``, ``events`` (= tail offset), ``bytes``,
    ``head``, ``t`` (server ms of the last append);
  * ``...:writers``: hash of writer id -> last batch sequence number (idempotent appends);

* a reader group's heartbeats, the ``host/pid`` its readers registered and the log formats they
  announced, beside the group's state synchronizer (same hash tag):
  ``<prefix>:{<sync name>}:heartbeats``, ``:clients`` and ``:formats``;
* what was created in a scope (see :mod:`readergroup.storage.vanished`):
  ``<prefix>:{catalog:<scope>}:created``, and for the list of scopes
  ``<prefix>:{scopes}:created``;
* external retention subscribers of a stream: ``<prefix>:{subscribers:<scope>/<stream>}``;
* the Spark sink's staging lists and committed jobs of a stream:
  ``<prefix>:{stage:<scope>/<stream>}:<job>:<part>:<segment>`` and ``...:jobs``;
* a stream's transactions (:mod:`readergroup.core.transactions`), one hash tag per stream:
  ``<prefix>:{txn:<scope>/<stream>}:t:<id>`` (record), ``...:s:<id>`` (staged events),
  ``...:open``, ``...:all``, ``...:epochs``, ``...:consumed`` and ``...:landed``.

State synchronizers (stream metadata, catalogs, groups) keep their own keys, laid out by
:mod:`statesync` under the same prefix with the synchronizer's name as hash tag.

Offsets count events from 0 within a segment; a *position* is the offset of the next event to
read, so ``tail - position`` is the lag in events and ``bytes - b`` the lag in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from readergroup.core.names import (
    SCOPES_SYNC_NAME,
    catalog_sync_name,
    group_sync_name,
    stream_sync_name,
    validate_name,
)


class SegmentKeys(NamedTuple):
    """The three keys of one segment (one hash tag)."""

    meta: str
    events: str
    writers: str


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """The keys under one ``prefix``."""

    prefix: str

    def segment(self, scope: str, stream: str, segment: int) -> SegmentKeys:
        """(meta, events, writers) keys of one segment."""
        base = f"{self.prefix}:{{{scope}/{stream}/{segment}}}"
        return SegmentKeys(f"{base}:meta", f"{base}:events", f"{base}:writers")

    def heartbeats(self, sync_name: str) -> str:
        """Hash of a reader group's heartbeats (reader id -> ``"<generation> <server ms>"``)."""
        return f"{self.prefix}:{{{sync_name}}}:heartbeats"

    def reader_clients(self, sync_name: str) -> str:
        """Hash of the ``host/pid`` each reader of a group registered when it joined."""
        return f"{self.prefix}:{{{sync_name}}}:clients"

    def reader_formats(self, sync_name: str) -> str:
        """Hash of the newest group log format each reader of a group announced (reader id ->
        ``"<generation> <format>"``, see :mod:`readergroup.core.log_format`)."""
        return f"{self.prefix}:{{{sync_name}}}:formats"

    def created_record(self, scope: str | None) -> str:
        """Hash recording the synchronizers created in ``scope`` (``None``: the scopes)."""
        tag = SCOPES_SYNC_NAME if scope is None else catalog_sync_name(scope)
        return f"{self.prefix}:{{{tag}}}:created"

    def subscribers(self, scope: str, stream: str) -> str:
        """Hash of a stream's external retention subscribers (name -> stream cut text)."""
        return f"{self.prefix}:{{subscribers:{scope}/{stream}}}"

    def staging(self, scope: str, stream: str, job: str, segment: int, part: str) -> str:
        """A Spark sink task's staging list of events bound for one segment."""
        return f"{self.prefix}:{{stage:{scope}/{stream}}}:{job}:{part}:{segment}"

    def staged_jobs(self, scope: str, stream: str) -> str:
        """Hash of the Spark sink jobs committed to a stream (idempotent commits)."""
        return f"{self.prefix}:{{stage:{scope}/{stream}}}:jobs"

    def txn_record(self, scope: str, stream: str, txn_id: str) -> str:
        """A transaction's record (hash)."""
        return f"{self.prefix}:{{txn:{scope}/{stream}}}:t:{txn_id}"

    def txn_staged(self, scope: str, stream: str, txn_id: str) -> str:
        """A transaction's staged events (list)."""
        return f"{self.prefix}:{{txn:{scope}/{stream}}}:s:{txn_id}"

    def txn_open(self, scope: str, stream: str) -> str:
        """A stream's unfinished transactions (sorted set: id -> deadline, server ms)."""
        return f"{self.prefix}:{{txn:{scope}/{stream}}}:open"

    def txn_epochs(self, scope: str, stream: str) -> str:
        """A stream's transactional ids' epochs (hash)."""
        return f"{self.prefix}:{{txn:{scope}/{stream}}}:epochs"

    def txn_consumed(self, scope: str, stream: str) -> str:
        """The input positions consumed by reader groups' transactions into this stream
        (hash; consume-transform-produce)."""
        return f"{self.prefix}:{{txn:{scope}/{stream}}}:consumed"

    def txn_landed(self, scope: str, stream: str) -> str:
        """Committed transactions' plan entries (sorted set: ``"<segment>|<writer id>"`` ->
        finished server ms), so their fields in the segments' writer tables are deleted after
        the retention."""
        return f"{self.prefix}:{{txn:{scope}/{stream}}}:landed"

    def txn_all(self, scope: str, stream: str) -> str:
        """Every transaction of the stream whose record may still exist (sorted set: id ->
        created server ms), so deleting the stream finds every key without a scan."""
        return f"{self.prefix}:{{txn:{scope}/{stream}}}:all"

    def everything(self) -> str:
        """Glob pattern (Redis ACL ``~`` syntax) of every key under the prefix."""
        return f"{self.prefix}:*"

    def scope_patterns(self, scope: str) -> dict[str, str]:
        """Glob patterns (Redis ACL ``~`` syntax) matching exactly the keys of ``scope``, by
        kind.

        Names contain no glob characters and no ``/``, ``:`` or braces, so a pattern of scope
        ``a`` never matches a key of scope ``ab`` or of any other scope.

        >>> KeyLayout("rg").scope_patterns("shop")["groups"]
        'rg:{group:shop/*'
        """
        validate_name(scope, "scope")
        prefix = self.prefix
        return {
            "segments": f"{prefix}:{{{scope}/*",
            "segment_meta": f"{prefix}:{{{scope}/*}}:meta",
            "streams": f"{prefix}:{{{stream_sync_name(scope, '')}*",
            "groups": f"{prefix}:{{{group_sync_name(scope, '')}*",
            "catalog": f"{prefix}:{{{catalog_sync_name(scope)}}}:*",
            "subscribers": f"{prefix}:{{subscribers:{scope}/*",
            "staging": f"{prefix}:{{stage:{scope}/*",
            "transactions": f"{prefix}:{{txn:{scope}/*",
        }
