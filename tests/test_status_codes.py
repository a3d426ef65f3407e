"""One status-code convention across statesync and readergroup: codes mean one thing wherever
they appear, every code maps to exactly one exception, and every Lua script returns a status
code its header documents. Pure (reads the ``.lua`` files)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from readergroup.core.errors import ReaderGroupError
from readergroup.storage import segment_status
from readergroup.storage.scripts import SCRIPT_NAMES as SEGMENT_SCRIPTS
from readergroup.storage.scripts import script_body
from statesync import status
from statesync.errors import BackendProtocolError
from statesync.scripts import PRELUDE_NAMES
from statesync.scripts import SCRIPT_NAMES as STATESYNC_SCRIPTS

ROOT = Path(__file__).resolve().parent.parent
STATESYNC_CODES = {
    name: getattr(status, name)
    for name in (
        "OK",
        "CONFLICT",
        "NOT_FOUND",
        "TOO_LARGE",
        "STALE",
        "AHEAD",
        "DUPLICATE",
        "EXISTS",
        "REGRESSED",
    )
}
SEGMENT_CODES = {
    name: getattr(segment_status, name)
    for name in (
        "OK",
        "NOT_FOUND",
        "TOO_LARGE",
        "DUPLICATE",
        "REGRESSED",
        "SEALED",
        "PAST_TAIL",
        "CONFLICT",
        "TXN_FENCED",
        "TXN_CLOSED",
        "TXN_EXPIRED",
        "TXN_UNKNOWN",
        "TXN_POSITIONS",
    )
}


def test_a_code_means_one_thing_in_both_packages() -> None:
    assert len(set(STATESYNC_CODES.values())) == len(STATESYNC_CODES)
    assert len(set(SEGMENT_CODES.values())) == len(SEGMENT_CODES)
    assert all(code < status.FIRST_APPLICATION_CODE for code in STATESYNC_CODES.values())
    for name, code in SEGMENT_CODES.items():
        if name in STATESYNC_CODES:  # shared meaning, shared number
            assert code == STATESYNC_CODES[name], name
        else:  # readergroup's own outcome: a number no statesync script returns
            assert code >= status.FIRST_APPLICATION_CODE, name


def test_every_segment_error_code_raises_exactly_its_exception() -> None:
    raised: dict[int, type[BaseException]] = {}
    for code, (error, _) in segment_status.ERRORS.items():
        with pytest.raises(ReaderGroupError) as info:
            segment_status.check("seal_segment", "s/t/0", [code, 1, 2])
        assert type(info.value) is error and "s/t/0" in str(info.value)
        raised[code] = error
    assert len(set(raised.values())) == len(raised), "two codes raise the same exception"
    for code in set(SEGMENT_CODES.values()) - set(segment_status.ERRORS) - {segment_status.OK}:
        with pytest.raises(ReaderGroupError) as info:  # an outcome nobody expected here
            segment_status.check("seal_segment", "s/t/0", [code, 1, 2])
        assert type(info.value) is ReaderGroupError and str(code) in str(info.value)


OPERATIONS = ("append", "read", "compact", "initialize")


@pytest.mark.parametrize("code", sorted(set(STATESYNC_CODES.values()) - {status.OK}))
def test_every_statesync_code_raises_one_exception_whatever_the_operation(code: int) -> None:
    raised: set[type[BaseException]] = set()
    for operation in OPERATIONS:
        try:
            status.raise_for_status(operation, "n", [code, 1, status.OTHER_HISTORY])
        except Exception as exc:  # the type raised is what is checked
            raised.add(type(exc))
    assert len(raised) == 1, raised
    if code in (status.CONFLICT, status.STALE, status.EXISTS, status.DUPLICATE):
        assert raised == {BackendProtocolError}  # outcomes, never errors of their own


def lua_scripts() -> list[tuple[str, str]]:
    found = [(f"statesync/{n}", _statesync_body(n)) for n in STATESYNC_SCRIPTS]
    return found + [(f"readergroup/{n}", script_body(n)) for n in SEGMENT_SCRIPTS]


def _statesync_body(name: str) -> str:
    return (ROOT / "statesync" / "scripts" / f"{name}.lua").read_text()


def header_and_body(source: str) -> tuple[str, str]:
    lines = source.splitlines()
    split = next(i for i, line in enumerate(lines) if not line.startswith("--"))
    return "\n".join(lines[:split]), "\n".join(lines[split:])


@pytest.mark.parametrize(("name", "source"), lua_scripts(), ids=[n for n, _ in lua_scripts()])
def test_every_script_returns_a_status_its_header_documents(name: str, source: str) -> None:
    header, body = header_and_body(source)
    returns = re.findall(r"^\s*return\b(.*)$", body, flags=re.MULTILINE)
    assert returns, name
    returned = set()
    for value in returns:
        match = re.match(r"\s*\{(\d+)\b", value)
        assert match, f"{name}: returns {value.strip()!r}, not a table starting with a status"
        returned.add(int(match.group(1)))
    assert re.search(r"^-- Returns\b", header, flags=re.MULTILINE), f"{name}: no Returns section"
    documented = {int(c) for c in re.findall(r"^--\s+\{(\d+)\b", header, flags=re.MULTILINE)}
    assert returned == documented, f"{name}: returns {returned}, header documents {documented}"


def test_the_time_prelude_is_the_only_time_conversion() -> None:
    conversion = "math.floor(tonumber(now[2]) / 1000)"
    for name, source in lua_scripts():
        assert conversion not in source and "redis.call('TIME')" not in source, name
    assert "time" in PRELUDE_NAMES
