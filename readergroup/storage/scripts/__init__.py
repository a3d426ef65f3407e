"""The Lua scripts of the segment data plane, read once from the ``.lua`` files beside this
module. Each file starts with its KEYS/ARGV/returns contract; the return codes are those of
:mod:`readergroup.storage.segment_status`, which maps them to exceptions. Scripts that stamp
server time get statesync's ``time.lua`` prelude (``server_ms()``) prepended
(:data:`PRELUDES`); scripts that append events get this package's ``epoch.lua`` after it
(:data:`LOCAL_PRELUDES`), the consume-transform-produce scripts ``consumed.lua``."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from statesync.scripts import with_preludes

SCRIPT_NAMES = (
    "append_events",
    "seal_segment",
    "truncate_segment",
    "offset_at_time",
    "heartbeat",
    "commit_staged",
    "create_closed_segment",
    "open_segment",
    "txn_begin",
    "txn_stage",
    "txn_replan",
    "txn_finish",
    "txn_adopt",
    "txn_claim",
    "txn_merge",
)
PRELUDES: dict[str, tuple[str, ...]] = {
    "append_events": ("time",),
    "heartbeat": ("time",),
    "commit_staged": ("time",),
    "txn_begin": ("time",),
    "txn_stage": ("time",),
    "txn_finish": ("time",),
    "txn_adopt": ("time",),
    "txn_merge": ("time",),
}
"""Script -> the statesync preludes prepended to it, in order."""
LOCAL_PRELUDES: dict[str, tuple[str, ...]] = {
    "append_events": ("epoch",),
    "commit_staged": ("epoch",),
    "txn_claim": ("consumed",),
    "txn_stage": ("consumed",),
}
"""Script -> the preludes of this package prepended to it after the statesync ones."""


def script_body(name: str) -> str:
    """The text of ``name``'s ``.lua`` file, its header contract first (no prelude)."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    return (files(__package__) / f"{name}.lua").read_text(encoding="utf-8")


@cache
def script_source(name: str) -> str:
    """The source Redis runs for script ``name``: its preludes, then its body."""
    local = [_prelude(p) for p in LOCAL_PRELUDES.get(name, ())]
    return with_preludes("\n".join([*local, script_body(name)]), PRELUDES.get(name, ()))


def _prelude(name: str) -> str:
    return (files(__package__) / f"{name}.lua").read_text(encoding="utf-8")
