"""Appends through ``append_events.lua``, every batch of a round in one round trip on one
connection of the pool: one ``EVALSHA`` per batch (and the acknowledgement wait, if any), and
nothing else per append.

What is not sent per append any more (both were, on every small append):

* ``SCRIPT EXISTS``: redis-py's pipelines ask it before running any script. Here the script
  is run by its SHA; a server that does not have it (restarted, failed over, ``SCRIPT FLUSH``)
  answers ``NOSCRIPT`` without running anything, and only then is it loaded (``SCRIPT LOAD``)
  and the refused batches sent again: once per server, not per round.
* ``INFO server`` inside the script, which ``epoch.lua`` needs for the server's ``run_id``
  (a new epoch begins when the server appending to a segment changed). The connection
  remembers the ``run_id`` of the server its socket reaches
  (:mod:`readergroup.storage.raw_connection`) and passes it as an argument; until it knows it
  (a new socket), it passes none, the script asks ``INFO`` itself and its reply says what it
  found. So ``INFO`` runs once per connection, and an append reaching another server (a
  failover, a restart: a new socket) is never given an old server's ``run_id``.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError
from redis.typing import EncodableT

from readergroup.storage.keys import KeyLayout
from readergroup.storage.raw_connection import (
    known_server,
    pooled_connection,
    remember_server,
    round_trip,
    text,
)
from readergroup.storage.segment_records import AppendBatch


def append_by_script(
    client: redis.Redis,
    layout: KeyLayout,
    script: Script,
    batches: Sequence[AppendBatch],
    wait: Sequence[Any] | None,
) -> tuple[list[Any], Any]:
    """Run ``script`` (``append_events.lua``) for each of ``batches``, then ``wait`` (if any),
    in one round trip on one connection; return the scripts' replies, error replies as values
    (one per batch, in order), and the reply of ``wait`` (``None`` without one). Connection
    errors propagate (redis-py's)."""
    with pooled_connection(client) as connection:
        return _append(connection, layout, script, batches, wait)


def _append(
    connection: Any,
    layout: KeyLayout,
    script: Script,
    batches: Sequence[AppendBatch],
    wait: Sequence[Any] | None,
) -> tuple[list[Any], Any]:
    server = known_server(connection) or ""
    steps = append_steps(layout, script.sha, script.script, batches, wait, server)
    replies: Any = None
    try:
        while True:
            replies = round_trip(connection, steps.send(replies))
    except StopIteration as finished:
        replies, acknowledged, learnt = finished.value
    remember_server(connection, learnt)
    return replies, acknowledged


AppendSteps = Generator[list[tuple[Any, ...]], list[Any], tuple[list[Any], Any, str | None]]
"""Commands to send in one round trip each (the replies, error replies as values, are sent
back in); returns the scripts' replies, the ``wait`` reply and the server's ``run_id`` if a
reply told it."""


def append_steps(
    layout: KeyLayout,
    sha: str,
    source: EncodableT,
    batches: Sequence[AppendBatch],
    wait: Sequence[Any] | None,
    server: str,
) -> AppendSteps:
    """The round trips of :func:`append_by_script`, without the I/O (the threaded writer's
    and the asyncio writer's appends both run them): ``EVALSHA`` per batch and the ``wait``;
    on ``NOSCRIPT``, ``SCRIPT LOAD`` and the refused batches again. ``server``: the
    ``run_id`` the connection knows (``""``: none)."""
    calls = [
        (
            "EVALSHA",
            sha,
            3,
            *layout.segment(batch.scope, batch.stream, batch.segment),
            *batch.script_args(server),
        )
        for batch in batches
    ]
    waits = [] if wait is None else [tuple(wait)]
    replies = yield calls + waits
    acknowledged = replies.pop() if wait is not None else None
    refused = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if refused:  # this server does not have the script yet: nothing of those batches ran
        (loaded,) = yield [("SCRIPT", "LOAD", source)]
        if isinstance(loaded, Exception):
            raise loaded
        again = yield [calls[i] for i in refused] + waits
        if wait is not None:
            acknowledged = again.pop()  # a wait covers every write before it on the connection
        for index, reply in zip(refused, again, strict=True):
            replies[index] = reply
    learnt = None
    if not server:
        for reply in replies:
            if isinstance(reply, list) and len(reply) > 6 and reply[6]:
                learnt = text(reply[6])
                break
    return replies, acknowledged, learnt
