"""Naming rule for synchronizers and key prefixes, and the Redis key layout. Pure code.

Rule: a name is 1 to 200 characters from ``A-Z a-z 0-9 . _ - / :`` and starts with a letter
or digit; a key prefix follows the same rule with at most 64 characters. Braces are never
allowed, because the name becomes the Redis Cluster hash tag: every key of one synchronizer
is ``<prefix>:{<name>}:<part>`` and so lands in one hash slot.
"""

from __future__ import annotations

import re

from statesync.errors import InvalidNameError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/:]*\Z")
MAX_NAME_LENGTH = 200
MAX_PREFIX_LENGTH = 64


def validate_name(name: object, *, what: str = "synchronizer name") -> str:
    """Return ``name`` if it follows the naming rule, else raise :class:`InvalidNameError`."""
    limit = MAX_PREFIX_LENGTH if what == "key prefix" else MAX_NAME_LENGTH
    if not isinstance(name, str):
        raise InvalidNameError(f"{what} must be a str, got {type(name).__name__}")
    if not 1 <= len(name) <= limit or not _NAME.match(name):
        raise InvalidNameError(
            f"invalid {what} {name!r}: use 1-{limit} characters from A-Z a-z 0-9 . _ - / : "
            "starting with a letter or digit (no braces or spaces)"
        )
    return name


class KeyLayout:
    """The Redis keys of one synchronizer; all share the hash tag ``{name}``.

    >>> KeyLayout("statesync", "orders").log
    'statesync:{orders}:log'
    """

    __slots__ = ("_base", "log", "meta", "snapshots", "wake", "wakers", "writers")

    def __init__(self, prefix: str, name: str) -> None:
        base = f"{validate_name(prefix, what='key prefix')}:{{{validate_name(name)}}}"
        self.meta = f"{base}:meta"
        """Hash: revision, trunc (entries up to it are deleted), snap, inc, format, created_ms."""
        self.log = f"{base}:log"
        """Stream: entry ``<revision>-0`` with fields d (payload) and t (server time, ms)."""
        self.snapshots = f"{base}:snap"
        """Hash: revision -> encoded snapshot; the newest and the one before it."""
        self.writers = f"{base}:writers"
        """Hash: writer id -> "<sequence> <revision>" of its last append (idempotence)."""
        self.wake = f"{base}:wake"
        """Stream: entry ``<revision>-0`` for each log entry that wakes every follower (see
        :attr:`~statesync.update.Update.wakes_followers`); only the newest few are kept. Block
        on it (and on :meth:`follower_wake`) from ``<your revision>-<largest>`` to be woken by
        the changes after yours."""
        self.wakers = f"{base}:wakers"
        """Sorted set: follower -> server time (ms) of its newest named wake-up; those older
        than the wake-ups' time to live are dropped (their streams have expired)."""
        self._base = base

    def follower_wake(self, follower: str) -> str:
        """Stream of the wake-ups that name ``follower`` (entry ``<revision>-0``, or ``-1``
        for a writer's second naming); only the newest few are kept, and the stream expires
        when nothing names the follower for a while. Entries that name some followers go to
        theirs alone, so a change wakes the followers it concerns, not every one.

        >>> KeyLayout("statesync", "orders").follower_wake("r1")
        'statesync:{orders}:wake:r1'
        """
        return f"{self._base}:wake:{follower}"

    @property
    def all(self) -> tuple[str, str, str, str, str, str]:
        """The fixed keys (the followers' wake streams are listed in :attr:`wakers`)."""
        return (self.meta, self.log, self.snapshots, self.writers, self.wake, self.wakers)
