"""The Lua scripts of the Redis backend, read once from the ``.lua`` files beside this module.

Each file starts with its contract: KEYS, ARGV, effects and return values. The return codes
are the ones in :mod:`statesync.status`, which maps them to exceptions.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

SCRIPT_NAMES = ("initialize", "append", "read", "compact")


@cache
def script_source(name: str) -> str:
    """The source text of script ``name`` (one of :data:`SCRIPT_NAMES`), read once."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    return (files(__package__) / f"{name}.lua").read_text(encoding="utf-8")
