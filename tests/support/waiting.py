"""Polling with a deadline (never a bare sleep waiting for a condition)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition"
) -> float:
    """Poll ``condition`` every 10 ms until it is true; fail after ``timeout`` seconds.
    Returns the seconds it took."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout, f"{what} not met within {timeout}s"
        time.sleep(0.01)
    return time.monotonic() - began
