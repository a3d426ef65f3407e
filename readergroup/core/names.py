"""Naming rules for scopes, streams, reader groups and readers. Pure code.

Rule: 1 to 64 characters from ``A-Z a-z 0-9 . _ -``, starting with a letter or digit
(Pravega's rule, restricted to ASCII). Reader ids may be up to 128 characters. Names
become parts of Redis keys and of the text form of stream cuts, so ``/``, ``:``, ``=``,
``,``, braces and spaces are never allowed.

>>> validate_name("orders", "stream")
'orders'
>>> split_scoped_stream("shop/orders", default_scope=None)
('shop', 'orders')
"""

from __future__ import annotations

import re

from readergroup.core.errors import InvalidNameError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*\Z")
_LIMITS = {"scope": 64, "stream": 64, "reader group": 64, "reader id": 128, "checkpoint": 128}


def validate_name(name: object, kind: str) -> str:
    """Return ``name`` if it follows the rule for ``kind``, else raise InvalidNameError."""
    limit = _LIMITS[kind]
    if not isinstance(name, str):
        raise InvalidNameError(f"{kind} name must be a str, got {type(name).__name__}")
    if not 1 <= len(name) <= limit or not _NAME.match(name):
        raise InvalidNameError(
            f"invalid {kind} name {name!r}: use 1-{limit} characters from A-Z a-z 0-9 . _ - "
            "starting with a letter or digit"
        )
    return name


def split_scoped_stream(text: str, default_scope: str | None) -> tuple[str, str]:
    """Parse ``"scope/stream"`` (or ``"stream"`` with ``default_scope``) into both names."""
    if not isinstance(text, str):
        raise InvalidNameError(f"stream must be given as 'scope/stream', got {text!r}")
    scope, sep, stream = text.partition("/")
    if not sep:
        if default_scope is None:
            raise InvalidNameError(f"stream {text!r} needs its scope: write 'scope/{text}'")
        scope, stream = default_scope, text
    return validate_name(scope, "scope"), validate_name(stream, "stream")


def stream_sync_name(scope: str, stream: str) -> str:
    """Name of the state synchronizer holding a stream's metadata."""
    return f"stream:{scope}/{stream}"


def group_sync_name(scope: str, group: str) -> str:
    """Name of the state synchronizer holding a reader group's state."""
    return f"group:{scope}/{group}"  # is_group_sync_name recognises the prefix


def is_group_sync_name(name: str) -> bool:
    """Whether ``name`` is a reader group's synchronizer name (:func:`group_sync_name`)."""
    return name.startswith("group:")


def catalog_sync_name(scope: str) -> str:
    """Name of the state synchronizer holding a scope's catalog (its streams and groups)."""
    return f"catalog:{scope}"


SCOPES_SYNC_NAME = "scopes"
"""Name of the state synchronizer listing the scopes (written by the operator role only)."""

LEGACY_CATALOG_SYNC_NAME = "catalog"
"""The one catalog every scope shared before per-scope catalogs (``readergroup admin
migrate`` moves it)."""
