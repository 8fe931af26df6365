"""Standing rules' patterns cannot take super-linear time (runs.patterns): a catastrophic
pattern is matched in linear time, what has no linear form is refused when the rule is
written (and admits nothing if it is already stored), and matching holds no row lock."""

from __future__ import annotations

import logging
import random
import re
import signal
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs.exceptions import InvalidArguments
from runs.models import StandingGrant
from runs.patterns import MAX_PROGRAM, PatternRefused, safe_pattern
from runs.services import standing_grant_propose
from tests.factories import make_action, make_run, make_tenant, make_user

CHARGE = "payment.charge"
# Python's `re` needs about 2**40 steps to refuse this target for `(a+)+$`.
EVIL_TARGET = "a" * 40 + "-"


@contextmanager
def within_seconds(seconds: float):
    """Fails the test instead of hanging it: SIGALRM interrupts even a running `re` match."""

    def late(signum, frame):
        raise TimeoutError(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def charges_rule(tenant, **fields) -> StandingGrant:
    return standing_grant_propose(
        tenant=tenant,
        tool=CHARGE,
        proposer=make_user(tenant),
        name="charges of the test customers",
        expires_at=timezone.now() + timedelta(days=1),
        **fields,
    )


def charge(tenant, target: str, *, action_id: str = "charge"):
    return make_action(
        make_run(tenant),
        tool=CHARGE,
        target=target,
        args={"amount_cents": 100, "currency": "EUR"},
        action_id=action_id,
    )


@pytest.mark.django_db
def test_a_catastrophic_target_pattern_is_matched_in_linear_time_at_proposal():
    tenant = make_tenant()
    charges_rule(tenant, target_pattern="(a+)+$")

    with within_seconds(5):
        refused = charge(tenant, EVIL_TARGET, action_id="evil")
        admitted = charge(tenant, "a" * 40, action_id="fine")

    assert (refused.status, admitted.status) == ("waiting_approval", "approved")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "uses backreferences"),
        (r"(?=a)a", "uses lookahead and lookbehind"),
        (r"(?<!b)a", "uses lookahead and lookbehind"),
        (r"(?i)cus_1", "uses inline flags"),
        (r"\bcus", "uses word boundaries"),
        (r"a++", "uses possessive quantifiers"),
        (r"(?>a+)", "uses atomic groups"),
        (r"(a)?(?(1)b|c)", "uses conditional groups"),
        (r"(a{100}){100}", f"is too large to match safely (over {MAX_PROGRAM} steps"),
        (r"cus_([", "is not a regular expression"),
    ],
)
def test_a_pattern_without_a_linear_form_is_refused_when_the_rule_is_written(pattern, reason):
    tenant = make_tenant()

    with pytest.raises(InvalidArguments) as refused:
        charges_rule(tenant, target_pattern=pattern)
    with pytest.raises(InvalidArguments) as refused_bound:
        charges_rule(tenant, arg_bounds={"currency": {"pattern": pattern}})

    assert str(refused.value).startswith(f"target_pattern {reason}")
    assert str(refused_bound.value).startswith(f"arg_bounds.currency.pattern {reason}")
    assert not StandingGrant.objects.exists()


@pytest.mark.django_db
def test_a_stored_rule_whose_pattern_is_now_refused_admits_nothing_and_says_so(caplog):
    tenant = make_tenant()
    rule = charges_rule(tenant, target_pattern="a+")
    # Written before patterns were restricted.
    StandingGrant.objects.filter(pk=rule.pk).update(target_pattern=r"(a)\1*")

    with caplog.at_level(logging.ERROR, logger="runs.services.standing"):
        action = charge(tenant, "aaa")

    assert action.status == "waiting_approval"
    assert f"standing rule {rule.pk} admits nothing" in caplog.text
    assert "backreferences" in caplog.text


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql
def test_a_proposal_the_rule_does_not_match_waits_for_no_lock_on_the_rule():
    tenant = make_tenant()
    rule = charges_rule(tenant, target_pattern="cus_[0-9]+")
    locked, release = threading.Event(), threading.Event()

    def hold_the_rule() -> None:
        # Another proposal counting a use of the rule holds its row lock meanwhile.
        try:
            with transaction.atomic():
                StandingGrant.objects.select_for_update().get(pk=rule.pk)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_rule)
    holder.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        action = charge(tenant, "someone-else")
        took = time.monotonic() - started
    finally:
        release.set()
        holder.join()

    assert action.status == "waiting_approval"
    assert took < 2, f"the proposal waited {took:.1f} s for the rule's lock"


def _random_pattern(rng: random.Random, depth: int = 0) -> str:
    atoms = ["a", "b", "[ab]", "[^a]", ".", r"\d", r"\w", r"\s", "x", "[a-c_]"]
    choice = rng.random()
    if depth > 3 or choice < 0.3:
        return rng.choice(atoms)
    if choice < 0.5:
        return _random_pattern(rng, depth + 1) + _random_pattern(rng, depth + 1)
    if choice < 0.65:
        return f"({_random_pattern(rng, depth + 1)}|{_random_pattern(rng, depth + 1)})"
    if choice < 0.85:
        quantifier = rng.choice(["*", "+", "?", "{2}", "{1,3}", "*?", "{0,2}", "{2,}"])
        return f"({_random_pattern(rng, depth + 1)}){quantifier}"
    return rng.choice(["^", r"\A"]) + _random_pattern(rng, depth + 1) + rng.choice(["$", r"\Z"])


def test_the_linear_matcher_agrees_with_python_re_on_the_subset():
    rng = random.Random(27)
    for _ in range(2000):
        pattern = _random_pattern(rng)
        compiled = safe_pattern(pattern)
        for _ in range(10):
            # No text ends in a newline: there `$` differs by design (it means the end).
            text = "".join(rng.choice("ab1 x_é\t") for _ in range(rng.randint(0, 8)))
            assert compiled.fullmatch(text) == bool(re.fullmatch(pattern, text)), (pattern, text)


def test_a_long_text_costs_linear_time_and_an_overlong_one_never_matches():
    with within_seconds(5):
        assert not safe_pattern("(a|aa)*b").fullmatch("a" * 99_000)
        assert safe_pattern(r"\d*\d*\d*x").fullmatch("1" * 99_000 + "x")
    assert not safe_pattern(".*").fullmatch("a" * 100_001)
    with pytest.raises(PatternRefused):
        safe_pattern("(?s).")
