"""The AutoScaler as a long-lived loop (issue 32 item 7): ``AutoScaler.run`` scales a stream
under load and stops cleanly when asked; failed rounds are logged and retried with a bounded,
jittered backoff; ``readergroup stream autoscale`` stops with exit code 0 on SIGTERM after
logging its last state. The loop's clock, waits and jitter are injected: no test sleeps."""

from __future__ import annotations

import logging
import random
import signal
import threading
from typing import Any

import pytest

from readergroup import (
    AutoScaler,
    EventStreamClientFactory,
    InvalidConfigError,
    RedisUnavailableError,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
)
from readergroup.admin.autoscale import AutoScaleRun, AutoScaleSchedule
from tests.support.cli import Service, cli
from tests.support.waiting import wait_until

RATE = ScalingPolicy.by_event_rate(target_rate=100, scale_factor=2, min_segments=1)


def active(manager: StreamManager, scope: str) -> int:
    return len(manager.stream_state(scope, "s").active_segments)


def test_the_loop_scales_a_stream_under_load_and_stops_when_asked(
    manager: StreamManager, redis_url: str, scope: str, caplog: pytest.LogCaptureFixture
) -> None:
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=RATE))
    now = [0]
    stop = threading.Event()
    waits: list[float] = []
    result: list[AutoScaleRun] = []
    caplog.set_level(logging.INFO, logger="readergroup.admin.autoscale")
    with EventStreamClientFactory.from_url(scope, redis_url) as factory:
        writer = factory.create_event_writer("s", UTF8StringSerializer())

        def one_loaded_second(seconds: float) -> bool:
            """The loop's pause: a second of server time with 300 events written in it."""
            waits.append(seconds)
            for i in range(300):
                writer.write_event(f"e{i}", routing_key=f"k{len(waits)}-{i}")
            writer.flush()
            now[0] += 1000
            return stop.is_set()

        scaler = AutoScaler(manager, scope, "s", now_ms=lambda: now[0])
        loop = threading.Thread(
            target=lambda: result.append(
                scaler.run(stop, AutoScaleSchedule(interval=1.0), wait=one_loaded_second)
            )
        )
        loop.start()
        try:
            wait_until(lambda: active(manager, scope) >= 3, what="two splits under load")
        finally:
            stop.set()
            loop.join(30)
        writer.close()
    assert not loop.is_alive() and len(result) == 1
    done = result[0]
    assert done.ended == "stopped" and done.failures == 0
    assert len(done.actions) >= 2 and {a.kind for a in done.actions} == {"split"}
    assert set(waits) == {1.0}  # every pause was the interval: no failure, no backoff
    assert done.active_segments == sorted(
        r.segment_id for r in manager.stream_state(scope, "s").active_segments
    )
    decisions = [r.getMessage() for r in caplog.records if "split of segments" in r.getMessage()]
    assert len(decisions) == len(done.actions), caplog.text
    assert "events/s (target 100.0)" in decisions[0]
    assert any("stopped after" in r.getMessage() for r in caplog.records), caplog.text
    manager.seal_stream(scope, "s")  # a sealed stream never scales again: the loop ends
    sealed = scaler.run(threading.Event(), wait=lambda _: False)
    assert (sealed.ended, sealed.rounds) == ("sealed", 1)
    assert "(the stream is sealed)" in sealed.summary


def test_failed_rounds_are_logged_and_retried_with_a_bounded_backoff(
    manager: StreamManager, scope: str, caplog: pytest.LogCaptureFixture
) -> None:
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=RATE))
    real = manager.connection.segments.segment_states
    outage = [2]  # the next rounds that find Redis unreachable

    def flaky(*args: Any) -> Any:
        if outage[0] > 0:
            outage[0] -= 1
            raise RedisUnavailableError("Redis unreachable (injected)")
        return real(*args)

    manager.connection.segments.segment_states = flaky  # type: ignore[method-assign]
    stop = threading.Event()
    waits: list[float] = []

    def pause(seconds: float) -> bool:
        waits.append(seconds)
        if len(waits) == 4:
            stop.set()
        return stop.is_set()

    schedule = AutoScaleSchedule(interval=2.0, max_backoff=3.0, max_failures=3)
    caplog.set_level(logging.INFO, logger="readergroup.admin.autoscale")
    done = AutoScaler(manager, scope, "s").run(stop, schedule, wait=pause, jitter=random.Random(7))
    assert (done.failures, done.rounds, done.ended) == (2, 2, "stopped")
    assert 1.0 <= waits[0] <= 2.0 and 1.5 <= waits[1] <= 3.0  # 2 * 2**(n-1), capped at 3
    assert waits[2:] == [2.0, 2.0]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2 and all(r.exc_info for r in warned), caplog.text
    assert "round failed (1 in a row)" in warned[0].getMessage()

    outage[0] = 10  # a longer outage: the loop gives up after max_failures, raising
    backoffs: list[float] = []
    with pytest.raises(RedisUnavailableError):
        AutoScaler(manager, scope, "s").run(
            threading.Event(), schedule, wait=lambda s: backoffs.append(s) is not None
        )
    assert len(backoffs) == 2 and outage[0] == 7
    with pytest.raises(InvalidConfigError):
        AutoScaleSchedule(interval=5.0, max_backoff=1.0)


def test_the_autoscale_command_stops_with_exit_0_on_sigterm(redis_url: str, scope: str) -> None:
    cli(redis_url, "stream", "create", f"{scope}/orders", "--segments", "2")
    command = ["stream", "autoscale", f"{scope}/orders"]
    refused = cli(redis_url, *command, ok=False)
    assert refused.returncode == 2 and "--target-rate" in refused.stderr, refused.stderr
    service = Service(redis_url, *command, "--target-rate", "1000", "--interval", "0.05")
    try:
        wait_until(lambda: service.printed("started: a round every 0.05 s"), what="the start")
        with StreamManager.from_url(redis_url) as manager:
            policy = manager.stream_state(scope, "orders").config.scaling_policy
        assert (policy.kind, policy.target_rate) == ("by_event_rate", 1000.0)
    finally:
        code = service.stop(signal.SIGTERM)
    log = "".join(service.stderr)
    assert code == 0 and "Traceback" not in log, log
    # (an idle stream below its target rate may be merged before the signal lands, on a
    # loaded machine: the summary names the segments active when it stopped, whichever)
    with StreamManager.from_url(redis_url) as manager:
        info = manager.get_stream_info(scope, "orders")
    active = f"active segments {sorted(s.segment_id for s in info.active_segments)}"
    last = [line for line in service.stderr if "stopped after" in line]
    assert len(last) == 1 and active in last[0], log
    assert "SIGTERM received: stopping" in log
    stdout = "".join(service.stdout)
    assert "autoscaler stopped after" in stdout and active in stdout
