"""Kafka's consumer-group conventions in the CLI: reset scenarios, selection, dry run, CSV
plans, member and state views, group and scope lists, start-position words, connection options
before the subcommand. Subprocesses against a real Redis."""

from __future__ import annotations

import csv
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from readergroup import EventStreamClientFactory, UTF8StringSerializer
from readergroup.core.log_format import NEWEST_FORMAT
from readergroup.spark.options import SourceOptions
from tests.support.cli import as_json, cli, refused, setup_group
from tests.support.waiting import wait_until


def positions(redis_url: str, group: str) -> dict[int, int]:
    described = as_json(redis_url, "group", "describe", group)
    return {s["segment"]: s["position"] for s in described["segments"]}


def test_reset_to_offset_of_one_segment_dry_run_export_and_apply_an_edited_plan(
    redis_url: str, scope: str, tmp_path: Path
) -> None:
    group = setup_group(redis_url, scope)
    tails = positions(redis_url, group)
    plan = as_json(
        redis_url, "group", "reset", group, "--to-offset", "2", "--segment", "0", "--dry-run"
    )
    assert plan["executed"] is False
    assert {p["segment"]: p["new"] for p in plan["plan"]} == {0: 2, 1: tails[1]}
    assert positions(redis_url, group) == tails, "a dry run changed positions"
    exported = tmp_path / "plan.csv"
    cli(redis_url, "group", "reset", group, "--to-earliest", "--export", str(exported))
    rows = list(csv.DictReader(exported.open()))
    assert [(r["segment"], r["current"], r["new"]) for r in rows] == [
        ("0", str(tails[0]), "0"),
        ("1", str(tails[1]), "0"),
    ]
    rows[1]["new"] = "1"
    with exported.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["stream", "segment", "current", "new"])
        writer.writeheader()
        writer.writerows(rows)
    cli(redis_url, "group", "reset", group, "--from-file", str(exported), "--execute")
    assert positions(redis_url, group) == {0: 0, 1: 1}
    rows[1]["new"] = str(tails[1] + 50)  # beyond the data: refused, nothing changes
    with exported.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=["stream", "segment", "current", "new"])
        writer.writeheader()
        writer.writerows(rows)
    line = refused(redis_url, "group", "reset", group, "--from-file", str(exported), "--execute")
    assert "outside" in line
    assert positions(redis_url, group) == {0: 0, 1: 1}


def test_reset_to_datetime_reads_a_naive_time_as_utc_and_by_duration(
    redis_url: str, scope: str
) -> None:
    group = setup_group(redis_url, scope)
    done = cli(redis_url, "group", "reset", group, "--to-datetime", "2000-01-01T00:00:00")
    assert "2000-01-01T00:00:00.000+00:00 UTC" in done.stdout
    plan = as_json(redis_url, "group", "reset", group, "--to-datetime", "2000-01-01T01:00:00+01:00")
    assert plan["resolved"] == "--to-datetime resolved to 2000-01-01T00:00:00.000+00:00 UTC"
    assert all(p["new"] == 0 for p in plan["plan"])
    plan = as_json(redis_url, "group", "reset", group, "--by-duration", "PT1H")
    assert all(p["new"] == 0 for p in plan["plan"]), "every event is younger than an hour"
    plan = as_json(redis_url, "group", "reset", group, "--by-duration", "PT0S")
    assert all(p["new"] == p["current"] for p in plan["plan"])
    line = refused(redis_url, "group", "reset", group, "--to-datetime", "yesterday", code=2)
    assert "ISO 8601" in line
    line = refused(redis_url, "group", "reset", group, "--by-duration", "1 hour", code=2)
    assert "PT30M" in line


@pytest.mark.long  # about 16 s of CLI processes (make test-long; CI runs both)
def test_describe_members_state_and_group_and_scope_lists(redis_url: str, scope: str) -> None:
    group = setup_group(redis_url, scope)
    assert as_json(redis_url, "group", "describe", group, "--state")["state"] == "empty"
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        reader: Any = factory.create_reader("r1", "billing", UTF8StringSerializer())
        reader.read_next_event(timeout=0.1)
        wait_until(
            lambda: as_json(redis_url, "group", "describe", group, "--state")["state"] == "stable",
            what="a stable group",
        )
        members = as_json(redis_url, "group", "describe", group, "--members")["members"]
        assert [m["reader"] for m in members] == ["r1"]
        assert members[0]["client"] == f"{socket.gethostname()}/{os.getpid()}"
        assert len(members[0]["segments"]) == 2 and members[0]["stale"] is False
        assert members[0]["heartbeat_age_ms"] is not None and members[0]["generation"] >= 1
        assert members[0]["log_format"] == NEWEST_FORMAT  # a reader of this version
        table = cli(redis_url, "group", "describe", group, "--members").stdout
        assert "host/pid" in table and "online" in table
        listed = as_json(redis_url, "group", "list", scope)["groups"]
        assert [(g["group"], g["state"], g["readers"]) for g in listed] == [
            ("billing", "stable", 1)
        ]
        assert listed[0]["lag_events"] == 0 and listed[0]["segments"] == 2
        reader.close()
    assert as_json(redis_url, "group", "describe", group, "--state")["state"] == "empty"
    everywhere = as_json(redis_url, "group", "list", "--all-groups")["groups"]
    assert {"scope": scope, "group": "billing"}.items() <= next(
        g for g in everywhere if g["scope"] == scope
    ).items()
    scopes = {s["scope"]: s["streams"] for s in as_json(redis_url, "scope", "list")["scopes"]}
    assert scopes[scope] == 1
    cli(redis_url, "stream", "delete", f"{scope}/orders", "--seal", "--force")
    assert as_json(redis_url, "group", "describe", group, "--state")["state"] == "dead"
    described = as_json(redis_url, "group", "describe", group)
    assert described["missing_streams"] == [f"{scope}/orders"]
    assert "DELETED" in cli(redis_url, "group", "describe", group).stdout


def test_one_set_of_start_words_everywhere(redis_url: str, scope: str) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders")
    cli(redis_url, "stream", "write", f"{scope}/orders", "--count", "10")
    for word, expected in (("earliest", 0), ("head", 0), ("latest", 10), ("tail", 10)):
        cli(
            redis_url,
            "group",
            "create",
            f"{scope}/g-{word}",
            "--stream",
            f"{scope}/orders",
            "--start",
            word,
        )
        assert positions(redis_url, f"{scope}/g-{word}") == {0: expected}
    refused(
        redis_url,
        "group",
        "create",
        f"{scope}/g-x",
        "--stream",
        f"{scope}/orders",
        "--start",
        "beginning",
        code=2,
    )
    base = {"redis_url": redis_url, "scope": scope, "stream": "orders"}
    for start, end in (("head", "tail"), ("earliest", "latest")):
        options = SourceOptions.parse({**base, "start_stream_cut": start, "end_stream_cut": end})
        assert (options.start_stream_cut, options.end_stream_cut) == ("earliest", "latest")


def test_connection_options_go_before_the_subcommand_too(redis_url: str, scope: str) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders")
    nowhere = "redis://127.0.0.1:1/0"
    listed = cli(nowhere, "--redis-url", redis_url, "--json", "stream", "list", scope).stdout
    assert "orders" in listed and listed.lstrip().startswith("{")
    listed = cli(nowhere, "--json", "stream", "list", scope, "--redis-url", redis_url).stdout
    assert "orders" in listed
    prefixed = cli(redis_url, "--key-prefix", "other", "--json", "scope", "list").stdout
    assert scope not in prefixed
