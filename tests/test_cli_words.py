"""First-day snags of the CLI (issue 32 item 6): one set of start words in every option
(``--to-head``/``--to-tail`` wherever ``--to-earliest``/``--to-latest`` are), a legend for the
reset plan's blank cells, piped output never cut (the demo's: ``tests/test_examples.py``), no
repair warning on a plain ``seal_stream`` (an interrupted scale's: ``tests/test_streams.py``),
no setuptools banner from the package metadata."""

from __future__ import annotations

import json
import logging
import tomllib
from typing import Any

import pytest

from readergroup import EventStreamClientFactory, StreamManager, UTF8StringSerializer
from readergroup.cli.reset_options import BLANK_CELLS
from tests.support.cli import ROOT, invoke


def plan_of(redis_url: str, group: str, *words: str) -> list[dict[str, Any]]:
    plan: list[dict[str, Any]] = json.loads(
        invoke(redis_url, "group", "reset", group, *words, "--json")
    )["plan"]
    return plan


def test_head_and_tail_words_work_wherever_earliest_and_latest_do(
    redis_url: str, scope: str
) -> None:
    stream, group = f"{scope}/orders", f"{scope}/billing"
    invoke(redis_url, "stream", "create", stream, "--segments", "2")
    invoke(redis_url, "stream", "write", stream, "--count", "30")
    invoke(redis_url, "group", "create", group, "--stream", stream, "--start", "tail")
    assert plan_of(redis_url, group, "--to-head") == plan_of(redis_url, group, "--to-earliest")
    assert plan_of(redis_url, group, "--to-tail") == plan_of(redis_url, group, "--to-latest")
    assert {p["new"] for p in plan_of(redis_url, group, "--to-head")} == {0}
    assert "--to-earliest, --to-head" in invoke(redis_url, "group", "reset", "--help")
    assert "--to-latest, --to-tail" in invoke(redis_url, "group", "reset", "--help")
    invoke(redis_url, "group", "reset", group, "--to-head", "--execute")
    described = json.loads(invoke(redis_url, "group", "describe", group, "--json"))
    assert described["total_lag"]["events"] == 30
    assert "--to-tail, --to-latest" in invoke(redis_url, "stream", "truncate", "--help")
    invoke(redis_url, "stream", "truncate", stream, "--to-latest")
    info = json.loads(invoke(redis_url, "stream", "describe", stream, "--json"))
    assert [s["head"] for s in info["segments"]] == [s["tail"] for s in info["segments"]], info


def test_the_reset_plan_explains_its_blank_cells_and_piped_output_is_never_cut(
    redis_url: str, scope: str
) -> None:
    stream = f"{scope}/orders"
    group = f"{scope}/a-group-name-long-enough-to-be-cut-in-a-narrow-terminal"
    invoke(redis_url, "stream", "create", stream, "--segments", "2")
    invoke(redis_url, "stream", "write", stream, "--count", "20")
    invoke(redis_url, "group", "create", group, "--stream", stream)
    invoke(redis_url, "stream", "scale", stream, "--split", "0")
    invoke(redis_url, "stream", "write", stream, "--count", "20")
    plan = invoke(redis_url, "group", "reset", group, "--to-latest", columns=40)
    assert "…" not in plan, plan
    rows = [line for line in plan.splitlines() if stream in line]
    assert len(rows) == 4, plan  # 0 and 1 now; the successors of 0 in the plan
    assert " ".join(BLANK_CELLS.split()) in " ".join(plan.split()), plan
    listed = invoke(redis_url, "group", "list", scope, columns=40)
    assert group in listed and "…" not in listed, listed
    assert all(p["current"] is not None for p in plan_of(redis_url, group, "--to-earliest"))
    assert "blank current" not in invoke(redis_url, "group", "reset", group, "--to-earliest")


def test_a_plain_seal_does_not_warn(
    manager: StreamManager, redis_url: str, scope: str, caplog: pytest.LogCaptureFixture
) -> None:
    manager.create_stream(scope, "plain")
    manager.create_stream(scope, "scaled")
    manager.scale_stream(scope, "scaled", [0], [(0.0, 0.5), (0.5, 1.0)])
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        for name in ("plain", "scaled"):
            with factory.create_event_writer(name, UTF8StringSerializer()) as writer:
                writer.write_event("k", "e")
    caplog.set_level(logging.INFO, logger="readergroup")
    for name in ("plain", "scaled"):
        assert manager.seal_stream(scope, name)
        states = manager.segment_states(
            scope, name, sorted(manager.stream_state(scope, name).segments)
        )
        assert all(s.sealed for s in states.values())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "sealed stream" in caplog.text


def test_the_package_metadata_uses_an_spdx_license() -> None:
    """setuptools (>= 77) prints a deprecation banner on every build for a ``project.license``
    table; an SPDX string is what it asks for."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(project["project"]["license"], str)
    assert "setuptools>=77" in project["build-system"]["requires"]
