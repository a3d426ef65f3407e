"""Idle asyncio readers of one event loop (issue 29), on a real Redis: their periodic looks are
one timer of the loop per ``group_refresh_time`` (shared), not one per reader; and an idle
reader's read calls post no maintenance round when an auto commit is due with nothing to
commit; and its parked ``XREAD`` blocks up to ``MAX_PARKED_BLOCK_SECONDS`` on the server (a read
call's own wait as before; an ``async for`` call's until that read's reply, unless a maintenance
round or ``stop_iteration`` needs it sooner). Counts and arguments, never times."""

from __future__ import annotations

import asyncio
from typing import Any

from readergroup import ReaderNotInGroupError, UTF8StringSerializer
from readergroup.aio import AsyncEventStreamClientFactory, AsyncEventStreamReader
from readergroup.aio.looks import looks_of
from readergroup.client.fetch_core import PARK_GRACE
from readergroup.storage.connection import RedisConnection
from readergroup.storage.multi_read import MAX_PARKED_BLOCK_SECONDS
from tests.support import fetchers
from tests.test_aio_idle import _own, idle_rounds
from tests.test_aio_reader import make_group, write

connection = fetchers.redis_connection  # (the fixture, under this name here)

READERS = 4


def _look_timers(loop: asyncio.AbstractEventLoop) -> int:
    """The loop's pending timers that are periodic looks (a reader's own, or the shared one)."""
    scheduled: list[asyncio.TimerHandle] = getattr(loop, "_scheduled", [])
    names = [getattr(h._callback, "__qualname__", "") for h in scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    return sum(1 for n in names if n.endswith(("<locals>.look", "PeriodicLooks._tick")))


def test_idle_readers_of_one_loop_share_one_periodic_look(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """Four readers own their segments and their maintenance tasks wait idle: the loop holds
    one look timer for them all (before: one per reader), and every reader is registered
    with it."""
    make_group(connection, scope, segments=8, group_refresh_time=0.05, commit_mode="manual")

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            readers: list[AsyncEventStreamReader[str]] = []
            for n in range(READERS):
                readers.append(await factory.create_reader(f"r{n}", "g", UTF8StringSerializer()))
            async with asyncio.timeout(20):
                while sorted(len(r.assignment()) for r in readers) != [2] * READERS:
                    await asyncio.gather(*(r.read_next_event(timeout=0.05) for r in readers))
                # settled: every maintenance task waits, looked at by the shared timer
                while len(looks_of(loop)) != READERS or _look_timers(loop) > 1:
                    await asyncio.gather(*(r.read_next_event(timeout=0.05) for r in readers))
            timers, looks = _look_timers(loop), len(looks_of(loop))
            for reader in readers:
                await reader.close()
            return timers, looks

    timers, looks = asyncio.run(main())
    assert (timers, looks) == (1, READERS)


def test_an_idle_reader_posts_no_round_for_an_auto_commit_with_nothing_to_commit(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """Auto commit every 0.05 s, nothing ever read: 20 read calls of 0.1 s post no round (the
    threaded rule posted one per call once the interval had passed: about 20)."""
    make_group(connection, scope, auto_commit_interval=0.05, group_refresh_time=1.0)
    assert asyncio.run(idle_rounds(redis_url, scope)) <= 3


def test_an_idle_readers_parked_xread_blocks_up_to_max_block_seconds(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """heartbeat_interval 0.2 s: the parked ``XREAD`` of an idle reader's read calls blocks
    ``MAX_PARKED_BLOCK_SECONDS`` (10 s) on the server (before: 0.2 s, one ``XREAD`` per heartbeat
    interval), while each call still returns at its own timeout."""
    make_group(connection, scope)

    async def main() -> tuple[list[float], int]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader: AsyncEventStreamReader[Any] = await factory.create_reader(
                "a", "g", UTF8StringSerializer()
            )
            await _own(reader, 4)
            reads: Any = reader._fetcher._reads
            blocks: list[float] = []
            start = reads.start

            def spied(positions: Any, limit: int, block: float | None = None) -> Any:
                blocks.append(-1.0 if block is None else block)
                return start(positions, limit, block)

            reads.start = spied
            nothing = 0
            for _ in range(10):
                nothing += not (await reader.read_next_event(timeout=0.3)).is_event
            await reader.close()
            return blocks, nothing

    blocks, nothing = asyncio.run(main())
    assert nothing == 10
    assert blocks and max(blocks) == MAX_PARKED_BLOCK_SECONDS


def _spy_idle_waits(session: Any) -> list[float]:
    """The blocks of ``session``'s idle read calls' waits on the parked read, as asked."""
    blocks: list[float] = []
    parked_wait = session._aio_fetcher.parked_wait

    def spied(logs: Any, switches: int = 0) -> Any:
        parked = parked_wait(logs, switches)
        if parked is not None and not hasattr(parked, "spied"):
            ready = parked.ready

            async def ready_spied(timeout: float, interrupt: Any = None) -> bool:
                blocks.append(timeout)
                return bool(await ready(timeout, interrupt))

            parked.ready, parked.spied = ready_spied, True
        return parked

    session._aio_fetcher.parked_wait = spied
    return blocks


def test_async_for_waits_on_its_parked_read_until_the_reply(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """``async for`` skips timeouts, so an idle read call waits on the parked ``XREAD`` until
    its reply is due (up to ``MAX_PARKED_BLOCK_SECONDS`` on the server), not ``longest_block()``
    (heartbeat_interval 0.2 s here: before, a call and a wake-up every 0.2 s); what needs the
    call sooner interrupts the wait (a maintenance round: see the next test; ``stop_iteration``:
    the one after)."""
    make_group(connection, scope, commit_mode="manual", session_timeout=30.0)  # (idle looks: 22 s)

    async def main() -> tuple[list[float], float]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader: Any = await factory.create_reader("a", "g", UTF8StringSerializer())
            await _own(reader, 4)
            for _ in range(3):  # (idle calls: a read is parked for the next)
                await reader.read_next_event(timeout=0.3)
            blocks = _spy_idle_waits(reader._session)

            async def consume() -> None:
                async for _event in reader:
                    pass

            task = asyncio.create_task(consume())
            async with asyncio.timeout(20):
                while not blocks:
                    await asyncio.sleep(0.01)
            reader.stop_iteration()
            await asyncio.wait_for(task, timeout=10)
            longest = reader._session.longest_block()
            await reader.close()
            return blocks, longest

    blocks, longest = asyncio.run(main())
    assert longest == 0.2
    assert blocks and min(blocks) > 10 * longest  # (the parked read's time left: seconds)
    assert max(blocks) <= MAX_PARKED_BLOCK_SECONDS + PARK_GRACE


async def _iterating_until_idle(reader: Any) -> tuple[asyncio.Task[None], list[str]]:
    """A task consuming ``reader`` with ``async for`` (into the list returned), once its read
    call waits idle on the parked read."""
    seen: list[str] = []

    async def consume() -> None:
        async for event in reader:
            seen.append(event.event)

    task = asyncio.create_task(consume())
    async with asyncio.timeout(20):
        while not reader._session.idle_waiting:
            await asyncio.sleep(0.01)
    return task, seen


def test_a_maintenance_round_interrupts_an_idle_async_for_call_which_goes_on(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """Work posted to an idle ``async for`` reader (as a heartbeat's news, a look or a
    fencing posts it) starts a maintenance round, and the round's start ends the read call's
    wait on its parked read: the call goes on through its steps (it may have segments to
    read, listeners to call, a removal to raise), and the iteration goes on."""
    make_group(connection, scope, commit_mode="manual")

    async def main() -> tuple[int, bool, list[str]]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader: Any = await factory.create_reader("a", "g", UTF8StringSerializer())
            await _own(reader, 4)
            session = reader._session
            steps_calls: list[bool] = []
            serve_steps = session.serve_steps

            def spied_steps(*args: Any, **kwargs: Any) -> Any:
                steps_calls.append(bool(kwargs.get("fetched")))
                return serve_steps(*args, **kwargs)

            session.serve_steps = spied_steps
            task, seen = await _iterating_until_idle(reader)
            steps_calls.clear()
            session.wake.set()  # work posted: the maintenance task's round begins
            async with asyncio.timeout(5):  # (before: until the parked read's reply, 10 s)
                while True not in steps_calls:
                    await asyncio.sleep(0.01)
            write(connection, scope, [("k", "after")])
            async with asyncio.timeout(20):
                while "after" not in seen:
                    await asyncio.sleep(0.01)
            alive = not task.done()
            reader.stop_iteration()
            await asyncio.wait_for(task, timeout=10)
            await reader.close()
            return len(steps_calls), alive, seen

    steps, alive, seen = asyncio.run(main())
    assert steps >= 1 and alive and seen == ["after"]


def test_stop_iteration_ends_an_idle_async_for_without_waiting_out_its_parked_wait(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """``async for`` makes one read call per parked wait (up to ``heartbeat_interval``, 20 s
    here); ``stop_iteration()`` from another task (a shutdown handler) ends an idle iteration
    waiting on its parked read (an idle reader's usual call) within the deadline instead of at
    the end of that wait. The reader stays usable."""
    make_group(
        connection,
        scope,
        commit_mode="manual",
        session_timeout=60.0,
        heartbeat_interval=20.0,
        group_refresh_time=0.1,
    )

    async def main() -> list[str]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader: Any = await factory.create_reader("a", "g", UTF8StringSerializer())
            await _own(reader, 4)
            assert reader._session.longest_block() == 20.0
            for _ in range(3):  # (idle calls: a read is parked for the next)
                await reader.read_next_event(timeout=0.3)
            task, seen = await _iterating_until_idle(reader)
            reader.stop_iteration()
            await asyncio.wait_for(task, timeout=5.0)  # (the deadline: before, 20 s)
            write(connection, scope, [("k", "after")])
            async with asyncio.timeout(20):
                while True:  # the reader still reads
                    event = await reader.read_next_event(timeout=0.5)
                    if event.event is not None:
                        seen.append(event.event)
                        break
            await reader.close()
            return seen

    assert asyncio.run(main()) == ["after"]


def test_an_idle_async_for_reader_polls_within_max_poll_interval(
    redis_url: str, scope: str, connection: RedisConnection
) -> None:
    """An idle ``async for`` call is the reader's poll: with ``max_poll_interval`` 2 s (and a
    30 s session, so its parked read alone would keep the call waiting about 10 s) the calls
    end within half of it, and the heartbeat never removes the reader for not polling (found
    in review: it was removed, and rejoined, every 2 s)."""
    make_group(
        connection,
        scope,
        commit_mode="manual",
        session_timeout=30.0,
        max_poll_interval=2.0,
    )

    async def main() -> tuple[int, int, list[float]]:
        async with AsyncEventStreamClientFactory.from_url(scope, redis_url) as factory:
            reader: Any = await factory.create_reader("a", "g", UTF8StringSerializer())
            await _own(reader, 4)
            for _ in range(3):  # (idle calls: a read is parked for the next)
                await reader.read_next_event(timeout=0.3)
            generation = reader._session.member.generation
            blocks = _spy_idle_waits(reader._session)
            removals = 0

            async def consume() -> None:
                nonlocal removals
                try:
                    async for _event in reader:
                        pass
                except ReaderNotInGroupError:
                    removals += 1

            task = asyncio.create_task(consume())
            async with asyncio.timeout(30):
                while len(blocks) < 5 and not task.done():  # 5 idle calls: over 4 s
                    await asyncio.sleep(0.05)
            reader.stop_iteration()
            await asyncio.wait_for(task, timeout=10)
            now = reader._session.member.generation
            await reader.close()
            return removals, now - generation, blocks

    removals, generations, blocks = asyncio.run(main())
    assert (removals, generations) == (0, 0)
    assert len(blocks) >= 5 and max(blocks) <= 1.0
