from __future__ import annotations

import random

import pytest

from runs.tools.retry import DEFAULT_POLICY, RetryPolicy


def test_delays_stay_within_the_doubling_cap_and_max_delay():
    policy = RetryPolicy(base_delay=0.5, max_delay=8.0)
    rng = random.Random(42)

    for attempt in range(1, 12):
        ceiling = min(8.0, 0.5 * 2 ** (attempt - 1))
        delays = [policy.next_delay(attempt=attempt, retry_after=None, rng=rng) for _ in range(200)]
        assert all(0 <= delay <= ceiling for delay in delays)
        # Full jitter spreads over the whole range, not just near the cap.
        assert min(delays) < ceiling * 0.1
        assert max(delays) > ceiling * 0.9


def test_the_same_seed_gives_the_same_delays():
    policy = RetryPolicy()

    first = [policy.next_delay(attempt=n, retry_after=None, rng=random.Random(7)) for n in (1, 2)]
    again = [policy.next_delay(attempt=n, retry_after=None, rng=random.Random(7)) for n in (1, 2)]

    assert first == again


def test_retry_after_is_a_floor_even_beyond_max_delay():
    policy = RetryPolicy(base_delay=0.5, max_delay=2.0)
    rng = random.Random(1)

    delays = [policy.next_delay(attempt=1, retry_after=3.0, rng=rng) for _ in range(100)]
    assert delays == [3.0] * 100
    assert policy.next_delay(attempt=30, retry_after=0.0, rng=rng) <= 2.0


def test_huge_attempt_numbers_do_not_overflow():
    assert (
        RetryPolicy(max_delay=5.0).next_delay(
            attempt=10_000, retry_after=None, rng=random.Random(3)
        )
        <= 5.0
    )


def test_by_default_only_transient_errors_are_retried():
    assert DEFAULT_POLICY.should_retry(error_class="transient", attempts_made=1, elapsed=0)
    assert DEFAULT_POLICY.should_retry(error_class="transient", attempts_made=4, elapsed=0)
    assert not DEFAULT_POLICY.should_retry(error_class="transient", attempts_made=5, elapsed=0)
    for error_class in (
        "invalid_arguments",
        "permission_denied",
        "business_rejection",
        "idempotency_conflict",
        "unsupported_tool",
        "tool_result_uncertain",
        "receipt_digest_mismatch",
    ):
        assert not DEFAULT_POLICY.should_retry(error_class=error_class, attempts_made=1, elapsed=0)


def test_attempt_limits_are_per_error_class():
    policy = RetryPolicy(max_attempts={"transient": 2, "business_rejection": 3})

    assert not policy.should_retry(error_class="transient", attempts_made=2, elapsed=0)
    assert policy.should_retry(error_class="business_rejection", attempts_made=2, elapsed=0)


def test_no_attempt_starts_after_the_total_deadline():
    policy = RetryPolicy(total_deadline=60.0)

    assert policy.should_retry(error_class="transient", attempts_made=1, elapsed=59.9)
    assert not policy.should_retry(error_class="transient", attempts_made=1, elapsed=60.0)


@pytest.mark.parametrize(
    "fields",
    [
        {"max_attempts": {"tool_result_uncertain": 2}},
        {"max_attempts": {"receipt_digest_mismatch": 3}},
        {"max_attempts": {"transient": 0}},
        {"max_attempts": {"transient": True}},
        {"base_delay": 5.0, "max_delay": 1.0},
        {"base_delay": -1.0},
        {"call_timeout": (0.0, 5.0)},
        {"total_deadline": 0.0},
    ],
)
def test_a_nonsensical_policy_is_refused(fields):
    with pytest.raises(ValueError, match=r"max_attempts|never retried|delay|timeout|deadline"):
        RetryPolicy(**fields)


def test_attempt_numbers_count_from_one():
    with pytest.raises(ValueError, match="from 1"):
        DEFAULT_POLICY.next_delay(attempt=0, retry_after=None, rng=random.Random(0))
