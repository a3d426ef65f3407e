"""Checks and merges for reset plans (pure code): a reset may only name the streams and
segments a group reads, and whatever it does not select keeps its committed position.

A *plan* maps ``(scope/stream, segment)`` to the position the group restarts from. Plans made
here are validated against the group's own streams first, so a cut or checkpoint of another
stream is refused instead of silently rewinding the group's streams to their defaults.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from readergroup.core.errors import InvalidConfigError, InvalidStreamCutError
from readergroup.core.group_state import SegKey


def _described(streams: Iterable[str]) -> str:
    return ", ".join(sorted(streams)) or "nothing"


def select_streams(
    group: str, group_streams: Collection[str], wanted: Iterable[str] | None
) -> set[str]:
    """The ``scope/stream`` names of ``wanted`` (all the group's streams if ``None``); each must
    be one the group reads (a bare name matches ``*/name`` when that is unambiguous)."""
    if wanted is None:
        return set(group_streams)
    chosen: set[str] = set()
    for name in wanted:
        matches = [s for s in group_streams if s == name or s.partition("/")[2] == name]
        if len(matches) != 1:
            raise InvalidConfigError(
                f"reader group {group} does not read {name} (it reads "
                f"{_described(group_streams)}); nothing was changed"
            )
        chosen.add(matches[0])
    return chosen


def check_streams(group: str, group_streams: Collection[str], named: Iterable[str]) -> None:
    """Refuse a cut or checkpoint that names a stream the group does not read."""
    foreign = sorted(set(named) - set(group_streams))
    if foreign:
        raise InvalidStreamCutError(
            f"the reset names {_described(foreign)}, which reader group {group} does not read "
            f"(it reads {_described(group_streams)}); nothing was changed"
        )


def merge_plan(
    group: str,
    current: Mapping[SegKey, int],
    target: Mapping[SegKey, int],
    streams: Collection[str],
    segments: Collection[int] | None = None,
) -> dict[SegKey, int]:
    """``current`` with the selected part replaced by ``target``.

    Every segment of the selected ``streams`` takes its ``target`` position (the segment set may
    differ, e.g. a reset to the head of a stream that was scaled since); with ``segments``, only
    those segments move, and each must be one the group reads now and one ``target`` names.
    """
    plan = {key: position for key, position in current.items() if key[0] not in streams}
    if segments is None:
        plan.update({key: p for key, p in target.items() if key[0] in streams})
        for stream in streams:
            if not any(key[0] == stream for key in plan):
                raise InvalidStreamCutError(f"the reset gives no position for {stream}")
        return plan
    reading = {key for key in current if key[0] in streams}
    known = {segment for _, segment in reading}
    unknown = sorted(set(segments) - known)
    if unknown:
        raise InvalidConfigError(
            f"reader group {group} reads no segment {unknown} of {_described(streams)} (it "
            f"reads segments {sorted(known)}); nothing was changed"
        )
    for key in sorted(reading):
        if key[1] not in segments:
            plan[key] = current[key]
        elif key in target:
            plan[key] = target[key]
        else:
            raise InvalidConfigError(
                f"segment {key[1]} of {key[0]} has no position in the reset target (the stream "
                "was scaled): reset the whole stream instead; nothing was changed"
            )
    return plan


def check_plan(
    group: str,
    current: Mapping[SegKey, int],
    plan: Mapping[SegKey, int],
    bounds: Mapping[SegKey, tuple[int, int]],
) -> None:
    """A plan to apply must cover every stream the group reads now, and every position must lie
    within its segment's ``(head, tail)`` in ``bounds`` (missing from ``bounds``: no such
    segment)."""
    streams = {key[0] for key in current}
    check_streams(group, streams, {key[0] for key in plan})
    missing = streams - {key[0] for key in plan}
    if missing:
        raise InvalidConfigError(
            f"the plan gives no position for {_described(missing)}, which reader group {group} "
            "reads; nothing was changed"
        )
    for key, position in sorted(plan.items()):
        if key not in bounds:
            raise InvalidStreamCutError(
                f"segment {key[1]} of {key[0]} does not exist; nothing was changed"
            )
        head, tail = bounds[key]
        if not head <= position <= tail:
            raise InvalidStreamCutError(
                f"position {position} of segment {key[1]} of {key[0]} is outside its data "
                f"[{head}, {tail}]; nothing was changed"
            )
