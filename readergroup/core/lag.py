"""How far behind a reader is, and how the balancing turns rank readers by it. Pure code.

A reader's *lag* is the number of events between its positions and the tails of the segments
it owns (Pravega's distance to tail). A reader measures it as it commits (the commit looks at
the logs' tails anyway, see :meth:`~readergroup.client.group_session.GroupSession.commit`) and
reports it on the commit; the group's state publishes the reports at the next move (see
:mod:`~readergroup.core.group_state`), and the turns of :mod:`~readergroup.core.fair_share`
put the reader with less lag first to acquire and the one with more lag first to release.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

K = TypeVar("K")


def events_behind(positions: Mapping[K, int], tails: Mapping[K, int]) -> int:
    """Events between ``positions`` and ``tails`` (segment -> offset), summed over the
    segments of ``positions`` (a tail not known, or below the position, counts none).

    >>> events_behind({"a": 10, "b": 5, "c": 3}, {"a": 130, "b": 5})
    120
    """
    return sum(max(0, tails.get(key, position) - position) for key, position in positions.items())


def lag_ranks(lags: Mapping[str, int], readers: Iterable[str]) -> Callable[[str], int]:
    """Each of ``readers``' lag for the turns: the lag it published; one that published none
    (a previous version's reader, or one that has not committed since it joined) counts as the
    mean of the published ones (neutral: neither first nor last while they differ); every
    reader counts as 0 when none published (the order is then the one without lags).

    >>> rank = lag_ranks({"a": 120, "b": 0, "c": 9}, ["a", "b", "c", "old"])
    >>> [rank(r) for r in ("a", "b", "c", "old")]
    [120, 0, 9, 43]
    >>> lag_ranks({}, ["a"])("a")
    0
    """
    known = [lags[r] for r in readers if r in lags]
    if not known:
        return no_lag
    neutral = sum(known) // len(known)
    return lambda reader: lags.get(reader, neutral)


def no_lag(reader: str) -> int:
    """Every reader's lag when none is known."""
    return 0
