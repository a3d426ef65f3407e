"""Telling a reader's rebalance listeners of its segment changes, each change once to each
listener (as Kafka's ConsumerRebalanceListener): :class:`Telling`, the calls a read call (or
``close()``) has to make, taken off one by one as they are made.

A read call of the asyncio reader may be cancelled while it awaits a coroutine listener: that
listener is cancelled at its await like any code of the task, and its call counts as made (as
one that raised); the calls still to make stay in the :class:`Telling`, which the reader's next
read call (or ``close()``) finishes before anything else, and only then is the change carried
out (acquired segments handed out, releases sent). So a listener never hears a change twice,
nor misses one, and nothing of an acquired segment is handed out before every listener heard of
it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from readergroup.client.event_read import RebalanceListener
from readergroup.core.calls import Steps, call
from readergroup.core.group_state import SegKey

ListenerCall = tuple[Callable[[str, list[SegKey]], Any], list[SegKey]]


@dataclass
class Telling:
    """The listener calls a segment change still needs (in order), and the change to carry out
    once they are made: the segments released and acquired. ``failure``: the first exception a
    listener raised (the others are still called)."""

    calls: deque[ListenerCall]
    released: tuple[SegKey, ...] = ()
    acquired: tuple[SegKey, ...] = ()
    failure: Exception | None = field(default=None)


def listener_calls(
    listeners: Sequence[RebalanceListener],
    lost: Sequence[SegKey] = (),
    released: Sequence[SegKey] = (),
    acquired: Sequence[SegKey] = (),
) -> deque[ListenerCall]:
    """Each listener's calls, listener by listener: lost (``on_segments_lost``, else
    ``on_segments_released``), then released, then acquired."""
    calls: deque[ListenerCall] = deque()
    for listener in listeners:
        if lost:
            calls.append(
                (getattr(listener, "on_segments_lost", listener.on_segments_released), [*lost])
            )
        if released:
            calls.append((listener.on_segments_released, [*released]))
        if acquired:
            calls.append((listener.on_segments_acquired, [*acquired]))
    return calls


def tell_steps(telling: Telling, reader_id: str) -> Steps[None]:
    """Make ``telling``'s calls still to make, in order (``invoke``: the driver awaits a
    coroutine listener). Each call is taken off before it is made, so one abandoned mid-way (a
    cancelled task) is not made again; a listener's exception is kept in ``telling.failure``
    (the first one) and the other calls are made all the same."""
    calls = telling.calls
    while calls:
        method, keys = calls.popleft()
        try:
            yield from call("invoke", method, reader_id, list(keys))
        except Exception as exc:  # the application's code: raised once every call is made
            if telling.failure is None:
                telling.failure = exc
