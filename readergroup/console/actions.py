"""The console's actions (only with ``--allow-actions``): take a checkpoint, plan and apply a
reset (the plan the CLI's ``group reset`` prints, applied exactly as shown), and declare a dead
reader offline. Each runs on its own group handle, outside the views' lock."""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click

from readergroup.admin.group_manager import ReaderGroup, ReaderGroupManager
from readergroup.cli.reset_options import SCENARIOS, ResetRequest
from readergroup.core.errors import (
    InvalidConfigError,
    ReaderAlreadyOnlineError,
    ReaderGroupError,
    ReaderNotInGroupError,
)
from readergroup.core.group_state import SegKey
from readergroup.storage.connection import RedisConnection

logger = logging.getLogger(__name__)

CONSOLE_WRITER = f"console:{socket.gethostname().split('.')[0] or 'host'}"
"""The writer label of the console's writes (``group history`` shows ``console@HOST``)."""

WEB_SCENARIOS = tuple(s for s in SCENARIOS if s != "from_file")
"""The reset scenarios of the CLI the console offers (a file stays a CLI thing)."""

PLAN_TTL = 600.0
"""Seconds a shown reset plan can still be applied."""


@dataclass(frozen=True, slots=True)
class ShownPlan:
    scope: str
    group: str
    plan: dict[SegKey, int]
    shown_at: float


class Actions:
    """Checkpoint, reset (plan, then apply that very plan) and reader-offline."""

    def __init__(
        self, connection: RedisConnection, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._connection = connection
        self._clock = clock
        self._plans: dict[str, ShownPlan] = {}
        self._lock = threading.Lock()

    def _group(self, scope: str, name: str) -> ReaderGroup:
        manager = ReaderGroupManager(scope, self._connection, writer_label=CONSOLE_WRITER)
        return manager.get_reader_group(name)

    def checkpoint(self, scope: str, name: str, checkpoint: str, timeout: float) -> dict[str, Any]:
        result = self._group(scope, name).initiate_checkpoint(checkpoint, timeout)
        logger.info("console: checkpoint %s of %s/%s complete", checkpoint, scope, name)
        return {
            "checkpoint": checkpoint,
            "stream_cuts": {s: str(c) for s, c in result.stream_cuts.items()},
        }

    def plan_reset(self, scope: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """The CLI's dry run: ``[stream, segment, current, new]`` rows, and an id to apply it."""
        scenario = str(body.get("scenario", ""))
        if scenario not in WEB_SCENARIOS:
            raise InvalidConfigError(f"scenario must be one of {', '.join(WEB_SCENARIOS)}")
        value: Any = body.get("value")
        if scenario in ("to_earliest", "to_latest"):
            value = True
        elif scenario == "to_stream_cut":
            value = [v for v in str(value or "").split() if v]
        if value in (None, "", []):
            raise InvalidConfigError(f"{scenario} needs a value")
        request = ResetRequest(
            scenario,
            value,
            list(body.get("streams") or []) or None,
            [int(s) for s in body.get("segments") or []] or None,
            execute=False,
            export_path=None,
            timeout=float(body.get("timeout", 30.0)),
        )
        g = self._group(scope, name)
        current = g.refresh().positions()
        try:
            plan = request.plan(g)
        except click.BadParameter as exc:
            raise InvalidConfigError(exc.message) from exc
        except ValueError as exc:  # a value that is not a number, where one is needed
            if isinstance(exc, ReaderGroupError):
                raise
            raise InvalidConfigError(f"{scenario}: {exc}") from exc
        plan_id = secrets.token_urlsafe(16)
        with self._lock:
            now = self._clock()
            self._plans = {k: p for k, p in self._plans.items() if now - p.shown_at < PLAN_TTL}
            self._plans[plan_id] = ShownPlan(scope, name, plan, now)
        rows = [
            {
                "stream": s,
                "segment": seg,
                "current": current.get((s, seg)),
                "new": plan.get((s, seg)),
            }
            for (s, seg) in sorted({*plan, *current})
        ]
        return {"plan_id": plan_id, "resolved": request.resolved, "plan": rows}

    def apply_reset(self, scope: str, name: str, plan_id: str, timeout: float) -> dict[str, Any]:
        """Apply the plan shown under ``plan_id`` (once), exactly as shown."""
        with self._lock:
            shown = self._plans.pop(plan_id, None)
        if shown is None or (shown.scope, shown.group) != (scope, name):
            raise InvalidConfigError(
                "no such reset plan (plans expire after 10 minutes): plan again"
            )
        if self._clock() - shown.shown_at >= PLAN_TTL:
            raise InvalidConfigError("the reset plan expired: plan again")
        result = self._group(scope, name).apply_reset(shown.plan, timeout=timeout)
        logger.info("console: reset %s/%s to %d positions", scope, name, len(shown.plan))
        return {
            "applied": [
                {"stream": s, "segment": seg, "new": p}
                for (s, seg), p in sorted(result.starts.items())
            ],
            "declared_offline": list(result.declared_offline),
        }

    def reader_offline(self, scope: str, name: str, reader: str) -> dict[str, Any]:
        """Remove ``reader`` if it is dead (heartbeat older than the session timeout)."""
        g = self._group(scope, name)
        member = next((m for m in g.members() if m.reader == reader), None)
        if member is None:
            raise ReaderNotInGroupError(f"{reader!r} is not a member of {scope}/{name}")
        if not member.stale:
            raise ReaderAlreadyOnlineError(
                f"reader {reader!r} is online (heartbeat {member.heartbeat_age_ms} ms ago): only a "
                "dead reader can be removed here"
            )
        removed = g.reader_offline(reader)
        logger.info("console: declared reader %s of %s/%s offline", reader, scope, name)
        return {"reader": reader, "removed": removed}


def check_timeout(value: Any, default: float) -> float:
    try:
        timeout = float(default if value in (None, "") else value)
    except (TypeError, ValueError) as exc:
        raise InvalidConfigError(f"timeout must be a number of seconds, got {value!r}") from exc
    if not 0 < timeout <= 600:
        raise InvalidConfigError(f"timeout must be in (0, 600] seconds, got {timeout}")
    return timeout
