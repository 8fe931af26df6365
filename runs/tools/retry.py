"""When to try a tool call again, and how long to wait first.

Only the classes a policy lists may be tried more than once (by default only "transient");
every try carries the same idempotency key. Uncertain outcomes are never retried by policy:
the worker queries by key and, failing that, a human reconciles.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# Classes a policy may never retry blindly: the first try may have had its effect.
NEVER_RETRIED = frozenset({"tool_result_uncertain", "receipt_digest_mismatch"})


def _default_attempts() -> dict[str, int]:
    return {"transient": 5}


@dataclass(frozen=True)
class RetryPolicy:
    # Attempts allowed per error class, first attempt included; unlisted classes get 1.
    max_attempts: dict[str, int] = field(default_factory=_default_attempts)
    base_delay: float = 0.5
    max_delay: float = 30.0
    # (connect, read) seconds for each HTTP call.
    call_timeout: tuple[float, float] = (3.05, 10.0)
    # Seconds from the first attempt after which no further attempt starts.
    total_deadline: float = 300.0

    def __post_init__(self) -> None:
        for error_class, attempts in self.max_attempts.items():
            if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
                raise ValueError(f"max_attempts[{error_class!r}] must be an integer >= 1")
            if error_class in NEVER_RETRIED and attempts > 1:
                raise ValueError(f"{error_class} outcomes are never retried blindly")
        if not 0 <= self.base_delay <= self.max_delay:
            raise ValueError("delays must satisfy 0 <= base_delay <= max_delay")
        if len(self.call_timeout) != 2 or min(self.call_timeout) <= 0:
            raise ValueError("call_timeout must be (connect, read) seconds, both > 0")
        if self.total_deadline <= 0:
            raise ValueError("total_deadline must be > 0")

    def attempts_allowed(self, error_class: str) -> int:
        return self.max_attempts.get(error_class, 1)

    def next_delay(self, *, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number `attempt` (1 = the first try).

        Full jitter: uniform(0, min(max_delay, base_delay * 2**(attempt-1))), and never less
        than the server's Retry-After, even beyond max_delay: the server said when.
        """
        if attempt < 1:
            raise ValueError("attempt counts from 1")
        # Past 2**64 the cap has long been reached; avoid overflowing the float.
        ceiling = min(self.max_delay, self.base_delay * 2 ** min(attempt - 1, 64))
        delay = rng.uniform(0, ceiling)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay

    def should_retry(self, *, error_class: str, attempts_made: int, elapsed: float) -> bool:
        """May another attempt start, after attempts_made tries and elapsed seconds?

        Pass elapsed including the delay about to be waited to keep the deadline strict.
        """
        return attempts_made < self.attempts_allowed(error_class) and elapsed < self.total_deadline


DEFAULT_POLICY = RetryPolicy()
