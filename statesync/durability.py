"""Durable acknowledgement modes for appends, like Kafka's ``acks``. Pure.

* ``leader`` (default): an append is acknowledged once the primary has it. A failover to a
  replica that had not received it loses it.
* ``replicas=N``: after the append, ``WAIT N timeout`` on the same connection; acknowledged
  only once N replicas have it. A shortfall is :class:`~statesync.errors.AckTimeoutError`
  (retriable): the append landed on the primary and is re-sent (idempotently) until the
  replicas confirm or the retry budget ends.
* ``fsync``: after the append, ``WAITAOF 1 0 timeout``: acknowledged once the primary's
  append-only file has it on disk. Needs Redis/Valkey 7.2 or newer with ``appendonly yes``;
  elsewhere every append fails with :class:`~statesync.errors.AckUnsupportedError`.

>>> Acks.parse("replicas=2")
Acks(mode='replicas', replicas=2, timeout=5.0)
>>> str(Acks.parse("fsync", timeout=1.5)), Acks.parse("leader").wait_command()
('fsync', None)
>>> Acks.parse("replicas=1", timeout=0.25).wait_command()
('WAIT', 1, 250)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statesync.errors import InvalidConfigError

LEADER = "leader"
REPLICAS = "replicas"
FSYNC = "fsync"
_MODES = (LEADER, REPLICAS, FSYNC)


@dataclass(frozen=True, kw_only=True, slots=True)
class Acks:
    """When an append counts as acknowledged (see the module doc).

    Attributes:
        mode: ``"leader"`` (default), ``"replicas"`` or ``"fsync"``.
        replicas: for ``replicas``, how many replicas must have the append (1-100).
        timeout: seconds to wait for the replicas or the fsync per try (default 5.0; > 0,
            at most 3600).
    """

    mode: str = LEADER
    replicas: int = 0
    timeout: float = 5.0

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise InvalidConfigError(f"acks must be one of {_MODES}, got {self.mode!r}")
        if self.mode == REPLICAS and not 1 <= self.replicas <= 100:
            raise InvalidConfigError(f"acks=replicas=N needs N in 1..100, got {self.replicas}")
        if self.mode != REPLICAS and self.replicas != 0:
            raise InvalidConfigError(f"acks={self.mode} takes no replica count")
        if not 0 < self.timeout <= 3600:
            raise InvalidConfigError(f"ack timeout must be in (0, 3600] s, got {self.timeout}")

    @classmethod
    def parse(cls, text: str, *, timeout: float = 5.0) -> Acks:
        """``"leader"``, ``"replicas=N"`` or ``"fsync"``."""
        mode, _, count = str(text).strip().partition("=")
        if mode == REPLICAS:
            try:
                replicas = int(count)
            except ValueError:
                raise InvalidConfigError(f"acks={text!r}: expected replicas=N") from None
            return cls(mode=REPLICAS, replicas=replicas, timeout=timeout)
        if count:
            raise InvalidConfigError(f"acks={text!r}: only replicas takes =N")
        return cls(mode=mode, timeout=timeout)

    def __str__(self) -> str:
        return f"{REPLICAS}={self.replicas}" if self.mode == REPLICAS else self.mode

    def wait_command(self) -> tuple[Any, ...] | None:
        """The command to send after the append on the same connection (``None``: leader)."""
        millis = max(1, round(self.timeout * 1000))
        if self.mode == REPLICAS:
            return ("WAIT", self.replicas, millis)
        if self.mode == FSYNC:
            return ("WAITAOF", 1, 0, millis)
        return None

    def shortfall(self, reply: Any) -> str | None:
        """What the wait command's ``reply`` lacks (``None``: acknowledged as asked).

        >>> Acks.parse("replicas=2").shortfall(1)
        'only 1 of 2 replicas acknowledged within 5.0s'
        >>> Acks.parse("fsync").shortfall([1, 0]) is None
        True
        """
        if self.mode == REPLICAS:
            got = int(reply)
            if got < self.replicas:
                return f"only {got} of {self.replicas} replicas acknowledged within {self.timeout}s"
        elif self.mode == FSYNC and int(reply[0]) < 1:
            return f"the primary did not fsync its append-only file within {self.timeout}s"
        return None
