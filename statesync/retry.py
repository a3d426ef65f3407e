"""Bounded retries with jittered exponential backoff. Pure: clock and randomness are injected.

Every retry loop in the library draws its delays from a :class:`RetryPolicy` through a
:class:`RetryBudget`, so each loop is bounded twice: by a number of attempts and by a
deadline, whichever comes first.

Delays use "full jitter": before attempt ``n + 1`` (``n >= 1``) the wait is uniform in
``[0, min(max_delay, base_delay * 2 ** (n - 1))]``. Full jitter spreads contending clients
so that, under contention, they stop colliding in lockstep.

>>> import random
>>> from statesync.clock import ManualClock
>>> policy = RetryPolicy(max_attempts=3, deadline=10.0, base_delay=0.1, max_delay=1.0)
>>> budget = policy.start(ManualClock(), random.Random(7))
>>> budget.attempts
1
>>> 0 <= budget.next_delay() <= 0.1 and budget.attempts == 2
True
>>> 0 <= budget.next_delay() <= 0.2 and budget.attempts == 3
True
>>> budget.next_delay() is None   # a fourth attempt would break max_attempts
True
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from statesync.clock import Clock
from statesync.errors import InvalidConfigError


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How hard a retry loop tries.

    Attributes:
        max_attempts: attempts in all, the first included (default 64; 1 to 100000).
        deadline: seconds from the first attempt after which no new attempt starts
            (default 30.0; > 0).
        base_delay: upper bound of the first backoff, seconds (default 0.001; >= 0).
        max_delay: cap on any single backoff, seconds (default 0.25; >= base_delay).
    """

    max_attempts: int = 64
    deadline: float = 30.0
    base_delay: float = 0.001
    max_delay: float = 0.25

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 100_000:
            raise InvalidConfigError(f"max_attempts must be 1..100000, got {self.max_attempts}")
        if not self.deadline > 0:
            raise InvalidConfigError(f"deadline must be > 0 seconds, got {self.deadline}")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise InvalidConfigError(
                "need 0 <= base_delay <= max_delay, got "
                f"base_delay={self.base_delay} max_delay={self.max_delay}"
            )

    def delay_cap(self, failures: int) -> float:
        """Upper bound of the wait after ``failures`` failed attempts (``failures >= 1``)."""
        exponent = min(failures - 1, 60)
        return min(self.max_delay, self.base_delay * (2.0**exponent))

    def start(self, clock: Clock, rng: random.Random) -> RetryBudget:
        """Begin a loop whose first attempt is happening now."""
        return RetryBudget(self, clock, rng)


class RetryBudget:
    """The state of one retry loop: attempts made, time used, and the next wait.

    Who may call what: the loop that owns it, from one thread; ``next_delay`` once per
    failed attempt.
    """

    def __init__(self, policy: RetryPolicy, clock: Clock, rng: random.Random) -> None:
        self._policy = policy
        self._clock = clock
        self._rng = rng
        self._started = clock.monotonic()
        self.attempts = 1

    @property
    def elapsed(self) -> float:
        return self._clock.monotonic() - self._started

    @property
    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self._policy.deadline - self.elapsed)

    def next_delay(self) -> float | None:
        """Account for a failed attempt; return how long to wait before the next one.

        ``None`` means the budget is spent (attempts or deadline): give up. A returned
        delay never carries the next attempt past the deadline.
        """
        if self.attempts >= self._policy.max_attempts:
            return None
        remaining = self.remaining
        if remaining <= 0:
            return None
        delay = self._rng.uniform(0.0, self._policy.delay_cap(self.attempts))
        if delay >= remaining:
            return None
        self.attempts += 1
        return delay
