"""The Lua scripts of the Redis backend, read once from the ``.lua`` files beside this module.

Each file starts with its contract: KEYS, ARGV, effects and return values. The return codes
are the ones in :mod:`statesync.status`, which maps them to exceptions. ``history.lua`` is
not a script: it is the prelude (helpers for the chained history of a log) prepended to the
scripts listed in :data:`PRELUDED`.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

SCRIPT_NAMES = ("initialize", "append", "read", "compact")
PRELUDED = frozenset({"append", "read", "compact"})


def _text(name: str) -> str:
    return (files(__package__) / f"{name}.lua").read_text(encoding="utf-8")


@cache
def script_source(name: str) -> str:
    """The source text of script ``name`` (one of :data:`SCRIPT_NAMES`), read once."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    body = _text(name)
    return f"{_text('history')}\n{body}" if name in PRELUDED else body
