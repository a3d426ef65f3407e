"""Operator safety: destructive commands refuse what would hurt a group, and say what they did.
Each test runs the CLI as a subprocess against a real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from readergroup import EventStreamClientFactory, ReaderGroupNotFoundError, UTF8StringSerializer
from tests.support.cli import as_json, cli, refused, setup_group
from tests.support.waiting import wait_until


def positions(redis_url: str, group: str) -> dict[tuple[str, int], int]:
    described = as_json(redis_url, "group", "describe", group)
    return {(s["stream"], s["segment"]): s["position"] for s in described["segments"]}


def test_reset_refuses_a_cut_or_selection_for_a_stream_the_group_does_not_read(
    redis_url: str, scope: str
) -> None:
    group = setup_group(redis_url, scope)
    before = positions(redis_url, group)
    assert sum(before.values()) == 30
    line = refused(
        redis_url,
        "group",
        "reset",
        group,
        "--to-stream-cut",
        f"rgcut1:{scope}/other:0=1",
        "--execute",
    )
    assert f"{scope}/other" in line and f"{scope}/orders" in line
    line = refused(
        redis_url,
        "group",
        "reset",
        group,
        "--to-earliest",
        "--stream",
        f"{scope}/other",
        "--execute",
    )
    assert f"{scope}/other" in line
    line = refused(
        redis_url, "group", "reset", group, "--to-earliest", "--segment", "7", "--execute"
    )
    assert "7" in line
    assert positions(redis_url, group) == before, "a refused reset changed positions"


def test_shift_by_moves_forward_and_a_negative_shift_back_like_kafka(
    redis_url: str, scope: str
) -> None:
    group = setup_group(redis_url, scope, start="head")
    assert set(positions(redis_url, group).values()) == {0}
    cli(redis_url, "group", "reset", group, "--shift-by", "5", "--execute")
    assert set(positions(redis_url, group).values()) == {5}
    cli(redis_url, "group", "reset", group, "--shift-by", "-2", "--execute")
    assert set(positions(redis_url, group).values()) == {3}


def test_group_delete_refuses_with_an_online_reader_unless_forced(
    redis_url: str, scope: str
) -> None:
    group = setup_group(redis_url, scope)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        reader: Any = factory.create_reader("r1", "billing", UTF8StringSerializer())
        reader.read_next_event(timeout=0.1)
        line = refused(redis_url, "group", "delete", group)
        assert "r1" in line and "--force" in line
        assert as_json(redis_url, "group", "describe", group)["readers"] == ["r1"]
        assert as_json(redis_url, "group", "delete", group, "--force")["deleted"] is True

        def noticed() -> bool:  # nothing wakes a reader: its next heartbeat finds the group gone
            try:
                reader.read_next_event(timeout=0.1)
            except ReaderGroupNotFoundError as exc:
                assert "billing" in str(exc)
                return True
            return False

        wait_until(noticed, 15, "the reader noticed its group was deleted")
        with pytest.raises(ReaderGroupNotFoundError):
            reader.read_next_event(timeout=0.1)  # and it stays so
        reader.close()
        keys = factory.connection.client.keys(f"*{scope}/billing*")
        assert keys == [], f"the deleted group left keys behind: {keys}"


def test_stream_delete_names_the_groups_reading_it_and_refuses_unless_forced(
    redis_url: str, scope: str
) -> None:
    group = setup_group(redis_url, scope)
    line = refused(redis_url, "stream", "delete", f"{scope}/orders", "--seal")
    assert group in line and "--force" in line
    assert as_json(redis_url, "stream", "describe", f"{scope}/orders")["sealed"] is False
    assert (
        as_json(redis_url, "stream", "delete", f"{scope}/orders", "--seal", "--force")["deleted"]
        is True
    )


def test_reset_execute_says_which_readers_were_declared_offline(redis_url: str, scope: str) -> None:
    group = setup_group(redis_url, scope)
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        reader: Any = factory.create_reader("sleepy", "billing", UTF8StringSerializer())
        # the reader does not read, so it cannot acknowledge the reset
        done = cli(
            redis_url, "group", "reset", group, "--to-earliest", "--execute", "--timeout", "0.5"
        )
        assert "declared offline" in done.stdout and "sleepy" in done.stdout
        applied = as_json(redis_url, "group", "describe", group)
        assert applied["readers"] == [] and set(positions(redis_url, group).values()) == {0}
        reader.close()
