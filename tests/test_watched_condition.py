"""``statesync.watched_condition``: a condition whose ``notify_all`` also calls its watchers,
and the asyncio wait built on it (the memory backends' blocking reads in an event loop)."""

from __future__ import annotations

import asyncio
import threading

from statesync.watched_condition import WatchedCondition, wait_for_news


def notify_from_a_thread(condition: WatchedCondition, change: list[int]) -> None:
    def run() -> None:
        with condition:
            change.append(1)
            condition.notify_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)


def test_watchers_hear_every_notify_all_while_they_watch() -> None:
    condition = WatchedCondition()
    heard: list[str] = []
    change: list[int] = []
    with condition.watching(lambda: heard.append(threading.current_thread().name)):
        notify_from_a_thread(condition, change)
        notify_from_a_thread(condition, change)
    notify_from_a_thread(condition, change)
    assert len(heard) == 2 and threading.current_thread().name not in heard


def test_an_asyncio_wait_is_woken_by_a_change_in_another_thread_and_the_loop_runs_on() -> None:
    condition = WatchedCondition()
    change: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        ticker = asyncio.create_task(tick())
        started = loop.time()
        waiting = asyncio.create_task(wait_for_news(condition.watching, lambda: len(change), 30))
        while ticks < 3:
            await asyncio.sleep(0.001)
        assert not waiting.done()
        await asyncio.to_thread(notify_from_a_thread, condition, change)
        assert await waiting == 1
        assert loop.time() - started < 30  # woken, not timed out
        ticker.cancel()

    asyncio.run(main())


def test_an_asyncio_wait_without_news_returns_the_last_look_at_its_timeout() -> None:
    condition = WatchedCondition()

    async def main() -> None:
        assert await wait_for_news(condition.watching, lambda: 0, 0.01) == 0
        assert await wait_for_news(condition.watching, lambda: 0, 0) == 0
        assert await wait_for_news(condition.watching, lambda: 7, 30) == 7  # news at once

    asyncio.run(main())
