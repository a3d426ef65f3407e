"""The operator CLI, run as a real subprocess against a real Redis."""

from __future__ import annotations

import pytest

from readergroup import EventStreamClientFactory, UTF8StringSerializer
from tests.support.cli import as_json, cli


def test_stream_lifecycle(redis_url: str, scope: str) -> None:
    name = f"{scope}/orders"
    assert as_json(redis_url, "stream", "create", name, "--segments", "4")["created"] is True
    assert (
        as_json(redis_url, "stream", "write", name, "--count", "500", "--keys", "20")["written"]
        == 500
    )
    info = as_json(redis_url, "stream", "describe", name)
    assert len(info["segments"]) == 4 and sum(s["tail"] for s in info["segments"]) == 500
    table = cli(redis_url, "stream", "describe", name).stdout
    assert "key range" in table and "[0.0000, 0.2500)" in table
    scaled = as_json(redis_url, "stream", "scale", name, "--split", "0", "--into", "2")
    assert scaled["sealed"] == [0] and len(scaled["created"]) == 2
    assert as_json(redis_url, "stream", "list", scope)["streams"] == ["orders"]
    head = as_json(redis_url, "stream", "truncate", name, "--to-tail")["head_cut"]
    assert head.startswith(f"rgcut1:{name}:")
    refused = cli(redis_url, "stream", "delete", name, ok=False)
    assert refused.returncode != 0 and "StreamNotSealedError" in refused.stderr
    assert as_json(redis_url, "stream", "delete", name, "--seal")["deleted"] is True


def test_bad_input_gives_clear_errors(redis_url: str, scope: str) -> None:
    done = cli(redis_url, "stream", "create", "bad name/x", ok=False)
    assert done.returncode != 0 and "invalid scope name" in done.stderr
    done = cli(redis_url, "group", "describe", f"{scope}/missing", ok=False)
    assert "ReaderGroupNotFoundError" in done.stderr
    done = cli(redis_url, "group", "reset", f"{scope}/g", ok=False)
    assert "exactly one" in done.stderr


@pytest.mark.long  # about 12 s of CLI processes (make test-long; CI runs both)
def test_group_describe_reset_history_watch(redis_url: str, scope: str) -> None:
    name = f"{scope}/orders"
    cli(redis_url, "stream", "create", name, "--segments", "2")
    cli(redis_url, "stream", "write", name, "--count", "100")
    cli(redis_url, "group", "create", f"{scope}/billing", "--stream", name)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        reader = factory.create_reader("cli-reader", "billing", UTF8StringSerializer())
        for _ in range(40):
            reader.read_next_event(timeout=1)
        reader.commit()
        described = as_json(redis_url, "group", "describe", f"{scope}/billing")
        assert described["readers"] == ["cli-reader"]
        lag = sum(s["lag_events"] for s in described["segments"])
        assert lag == described["total_lag"]["events"] and 0 < lag <= 100
        assert all(s["heartbeat_age_s"] is not None for s in described["segments"])
        history = as_json(redis_url, "group", "history", f"{scope}/billing")["entries"]
        kinds = " ".join(e["what"] for e in history)
        assert "AddReader" in kinds and "AcquireSegments" in kinds and "CommitPositions" in kinds
        assert any(e["by"] == "cli-reader" for e in history)
        done = cli(
            redis_url,
            "group",
            "checkpoint",
            f"{scope}/billing",
            "cp1",
            "--timeout",
            "0.5",
            ok=False,
        )  # the reader is not reading now, so it cannot acknowledge in time
        assert done.returncode != 0 and "cli-reader" in done.stderr
        plan = as_json(redis_url, "group", "reset", f"{scope}/billing", "--to-earliest")
        assert plan["executed"] is False and all(p["new"] == 0 for p in plan["plan"])
        reader.close()
    applied = as_json(
        redis_url, "group", "reset", f"{scope}/billing", "--shift-by", "-3", "--execute"
    )
    assert applied["executed"] is True
    watch = cli(
        redis_url, "group", "watch", f"{scope}/billing", "--iterations", "1", "--refresh", "0.1"
    )
    assert "lag" in watch.stdout
    assert [g["group"] for g in as_json(redis_url, "group", "list", scope)["groups"]] == ["billing"]
    assert (
        as_json(redis_url, "group", "reader-offline", f"{scope}/billing", "nobody")["removed"]
        is False
    )
    assert as_json(redis_url, "group", "delete", f"{scope}/billing")["deleted"] is True


def test_version_and_help(redis_url: str) -> None:
    assert "readergroup" in cli(redis_url, "--version").stdout
    text = cli(redis_url, "group", "--help").stdout
    for sub in ("describe", "reset", "checkpoint", "reader-offline", "history", "watch", "delete"):
        assert sub in text


@pytest.mark.parametrize("args", [["stream", "--help"], ["group", "reset", "--help"]])
def test_every_command_documents_itself(redis_url: str, args: list[str]) -> None:
    assert "Usage:" in cli(redis_url, *args).stdout
