"""Coalescing the script calls of many tasks of one event loop: :class:`ScriptBatcher`, one per
``redis.asyncio`` client (:func:`batcher_of`), sends the calls of one script that its callers
made in the same turn of the loop as ONE pipeline (``EVALSHA`` each, unchanged: the same
script, keys and arguments, each caller its own reply), so hundreds of idle asyncio readers
renewing their heartbeats at the same moment cost the loop one connection, one send and one
read per turn, not one each.

Each caller sees what a call of its own would have shown it: its own reply; its own error reply
(a ``ResponseError`` of one call fails that caller only, its neighbours get their replies);
and when the pipeline as a whole fails (the connection lost after redis-py's retries), each
caller gets the error the call would have raised (a copy each: one exception object is never
raised in two tasks). A script the server does not know (``NOSCRIPT``: restarted, flushed) is
loaded once and the calls that missed it sent again, as ``Script.__call__`` does for one call.
A caller cancelled before its batch is sent is left out of it; one cancelled after is only not
told (its call was sent). The pipeline runs in a task of its own, so a cancelled caller never
breaks the others' pending calls.
"""

from __future__ import annotations

import asyncio
import copy
import weakref
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

_Call = tuple[tuple[Any, ...], "asyncio.Future[Any]"]


class ScriptBatcher:
    """The script calls on ``client`` made in one turn of its event loop, sent together: one
    pipeline per script and first key (a heartbeat key: one group's readers)."""

    def __init__(self, client: Redis) -> None:
        self._client_ref = weakref.ref(client)  # (the client holds no reference back)
        self._pending: dict[tuple[str, Any], tuple[AsyncScript, list[_Call]]] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self.batches = 0
        """Pipelines (or single calls) sent so far: an instrument for tests and benchmarks."""

    async def call(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """``script(keys=keys, args=args)``'s reply, the call sent with the others of this
        turn (see the module doc)."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        batch = (script.sha, keys[0] if keys else None)
        if batch not in self._pending:
            self._pending[batch] = (script, [])
        self._pending[batch][1].append(((len(keys), *keys, *args), reply))
        return await reply

    @property
    def _client(self) -> Redis:
        client = self._client_ref()
        if client is None:  # (a caller's store holds it while the caller waits)
            raise RuntimeError("the client of these script calls is gone")
        return client

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for script, made in pending.values():
            calls = [c for c in made if not c[1].done()]  # (cancelled before it was sent)
            if calls:
                task = asyncio.get_running_loop().create_task(self._send(script, calls))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)

    async def _send(self, script: AsyncScript, calls: list[_Call]) -> None:
        self.batches += 1
        try:
            replies = await self._execute(script, [args for args, _ in calls])
            if any(isinstance(r, NoScriptError) for r in replies):
                script.sha = await self._client.script_load(script.script)
                missed = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
                again = await self._execute(script, [calls[i][0] for i in missed])
                for i, reply in zip(missed, again, strict=True):
                    replies[i] = reply
        except Exception as exc:  # the whole batch failed: each caller gets it
            for _, future in calls:
                if not future.done():
                    future.set_exception(_copy_of(exc))
            return
        for (_, future), reply in zip(calls, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _execute(self, script: AsyncScript, calls: list[tuple[Any, ...]]) -> list[Any]:
        """The replies of ``calls`` (``EVALSHA`` arguments after the sha), an error reply as
        its exception in its place; one call alone is sent as one (no pipeline). On a
        cluster, whose pipelines refuse ``EVALSHA``, the calls are sent at once, each on its
        own (each call's error its own)."""
        if len(calls) == 1:
            try:
                return [await self._client.evalsha(script.sha, *calls[0])]
            except NoScriptError as exc:
                return [exc]
        if isinstance(self._client, RedisCluster):  # (its pipelines refuse EVALSHA)
            return list(
                await asyncio.gather(
                    *(self._client.evalsha(script.sha, *args) for args in calls),
                    return_exceptions=True,
                )
            )
        async with self._client.pipeline(transaction=False) as pipe:
            for args in calls:
                pipe.evalsha(script.sha, *args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
            return replies


def _copy_of(exc: Exception) -> Exception:
    """A copy of ``exc`` to raise in one caller's task, with its cause and context (what the
    error translation reads: a cluster client's unreachable-node error is told by its cause)."""
    copied = copy.copy(exc)
    copied.__cause__, copied.__context__ = exc.__cause__, exc.__context__
    copied.__suppress_context__ = exc.__suppress_context__
    return copied


_BATCHERS: weakref.WeakKeyDictionary[Redis, ScriptBatcher] = weakref.WeakKeyDictionary()


def batcher_of(client: Redis) -> ScriptBatcher:
    """The one :class:`ScriptBatcher` of ``client`` (made at the first call; gone with the
    client): every heartbeat store of a factory's readers shares its client's, so their
    renewals coalesce."""
    batcher = _BATCHERS.get(client)
    if batcher is None:
        batcher = _BATCHERS[client] = ScriptBatcher(client)
    return batcher
