"""A sweep step that raises is logged once, backs off, and leaves the other steps running."""

from __future__ import annotations

import logging

from runs.execution.sweep_steps import MAX_BACKOFF_SECONDS, SweepSteps


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def broken() -> int:
    raise ZeroDivisionError("division by zero")


def test_a_failing_step_leaves_the_next_one_running_and_says_why_in_one_line():
    steps = SweepSteps(clock=Clock())
    errors: list[str] = []
    assert steps.run("escalate", broken, errors=errors) is None
    assert steps.run("deadline", lambda: 3, errors=errors) == 3
    assert errors == ["sweep step escalate failed: ZeroDivisionError: division by zero"]


def test_a_failing_step_logs_its_traceback_once_and_waits_longer_each_time(caplog):
    clock = Clock()
    steps = SweepSteps(clock=clock)
    tried: list[float] = []

    def failing() -> int:
        tried.append(clock.now)
        raise ZeroDivisionError("division by zero")

    with caplog.at_level(logging.INFO, logger="runs.execution.sweep"):
        for _ in range(600):  # ten minutes of one-second passes
            steps.run("escalate", failing, errors=[])
            clock.now += 1
    # Tried at 0, then after 2, 4, 8, 16, 32, 64, 128, 256 s: 9 tries, not 600.
    assert [round(t - 1000) for t in tried] == [0, 2, 6, 14, 30, 62, 126, 254, 510]
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1
    assert len(caplog.records) == len(tried)
    assert "9 times in a row" in caplog.records[-1].getMessage()


def test_the_wait_between_tries_stops_growing_at_its_cap():
    clock = Clock()
    steps = SweepSteps(clock=clock)
    for _ in range(20):
        steps.run("probe", broken, errors=[])
        clock.now = steps.failing["probe"].retry_at
    assert steps.failing["probe"].retry_at - clock.now == 0
    steps.run("probe", broken, errors=[])
    assert steps.failing["probe"].retry_at - clock.now == MAX_BACKOFF_SECONDS


def test_a_step_that_works_again_starts_afresh(caplog):
    clock = Clock()
    steps = SweepSteps(clock=clock)
    steps.run("relay", broken, errors=[])
    clock.now += 2
    with caplog.at_level(logging.INFO, logger="runs.execution.sweep"):
        assert steps.run("relay", lambda: 5, errors=[]) == 5
    assert "relay" not in steps.failing
    assert "works again after 1 failures" in caplog.text
    steps.run("relay", broken, errors=[])
    assert steps.failing["relay"].failures == 1
