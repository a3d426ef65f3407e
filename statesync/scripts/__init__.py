"""The Lua scripts of the Redis backend, read once from the ``.lua`` files beside this module.

Each file starts with its contract: KEYS, ARGV, effects and return values. The return codes
are the ones in :mod:`statesync.status`, which maps them to exceptions. Two files are not
scripts but preludes, prepended to the scripts that use them (:data:`PRELUDES`):
``history.lua`` (helpers for the chained history of a log) and ``time.lua`` (``server_ms()``,
the server's clock in ms; readergroup's segment scripts use it too, through :func:`prelude`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib.resources import files

SCRIPT_NAMES = ("initialize", "append", "read", "compact", "wake")
PRELUDE_NAMES = ("time", "history", "followers")
PRELUDES: dict[str, tuple[str, ...]] = {
    "initialize": ("time",),
    "append": ("time", "history", "followers"),
    "read": ("history",),
    "compact": ("history",),
    "wake": ("time", "history", "followers"),
}
"""Script -> the preludes prepended to it, in order."""


def _text(name: str) -> str:
    return (files(__package__) / f"{name}.lua").read_text(encoding="utf-8")


@cache
def prelude(name: str) -> str:
    """The source of prelude ``name`` (one of :data:`PRELUDE_NAMES`), read once."""
    if name not in PRELUDE_NAMES:
        raise KeyError(f"no prelude named {name!r}")
    return _text(name)


def with_preludes(body: str, preludes: Sequence[str]) -> str:
    """``body`` with each of ``preludes`` prepended, in order (how every loader joins them)."""
    return "\n".join([*(prelude(name) for name in preludes), body])


@cache
def script_source(name: str) -> str:
    """The source text of script ``name`` (one of :data:`SCRIPT_NAMES`), read once."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    return with_preludes(_text(name), PRELUDES[name])
