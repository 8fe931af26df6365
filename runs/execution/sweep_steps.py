"""Each step of a sweep pass runs on its own: one that raises is logged once, backs off,
and the pass's other steps still run.

A step that fails on every pass (a query a database cannot run, a table locked by a
migration) must not silence the rest of the sweep, nor scroll the log away with the same
traceback every second: its first failure is logged with the traceback, its repeats one line
each time it is tried again, and it is tried again after 2, 4, 8 ... up to 300 seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger("runs.execution.sweep")

MAX_BACKOFF_SECONDS = 300.0


@dataclass
class _Failing:
    failures: int
    retry_at: float


@dataclass
class SweepSteps:
    """The steps' failure bookkeeping for one sweeper process (`clock` is monotonic seconds)."""

    clock: Callable[[], float] = time.monotonic
    failing: dict[str, _Failing] = field(default_factory=dict)

    def run[T](self, name: str, step: Callable[[], T], *, errors: list[str]) -> T | None:
        """Runs `step` unless it is backing off; its result, or None when it failed or waited.
        A failure is appended to `errors` as one line."""
        now = self.clock()
        state = self.failing.get(name)
        if state is not None and now < state.retry_at:
            return None
        try:
            result = step()
        except Exception as error:
            failures = 1 if state is None else state.failures + 1
            delay = min(MAX_BACKOFF_SECONDS, 2.0**failures)
            self.failing[name] = _Failing(failures=failures, retry_at=now + delay)
            line = f"sweep step {name} failed: {type(error).__name__}: {error}"
            if failures == 1:
                logger.exception("%s (trying again in %.0f s)", line, delay)
            else:
                logger.warning("%s (%d times in a row; again in %.0f s)", line, failures, delay)
            errors.append(line)
            return None
        if state is not None:
            logger.info("sweep step %s works again after %d failures", name, state.failures)
            del self.failing[name]
        return result


# One sweeper process, one bookkeeping: the command's loop and sweep_once share it.
STEPS = SweepSteps()
