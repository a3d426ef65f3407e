"""The Lua scripts of the segment data plane, read once from the ``.lua`` files beside this
module. Each file starts with its KEYS/ARGV/returns contract; the return codes are those of
:mod:`readergroup.storage.segment_status`, which maps them to exceptions."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

SCRIPT_NAMES = (
    "append_events",
    "seal_segment",
    "truncate_segment",
    "offset_at_time",
    "heartbeat",
    "commit_staged",
    "create_closed_segment",
    "open_segment",
)


@cache
def script_source(name: str) -> str:
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    return (files(__package__) / f"{name}.lua").read_text(encoding="utf-8")
