"""Transient errors are retried with the same key, attempts visible; the others are not."""

from __future__ import annotations

import pytest
import requests

from runs.models import Action
from runs.services import endings
from sandbox.models import Effect
from tests.factories import approve, make_action, make_policy, make_run, make_tenant, make_user
from tests.processes import settled

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def _fault(sandbox: str, tool: str, fault: str, count: int = 1) -> None:
    requests.post(
        sandbox + "faults", json={"tool": tool, "fault": fault, "count": count}, timeout=5
    ).raise_for_status()


@pytest.mark.parametrize(
    ("fault", "retry_after"), [("rate_limit:1", 1.0), ("fail_before_commit", None)]
)
def test_transient_errors_are_retried_with_the_same_key_and_every_attempt_is_kept(
    workers, sandbox, fault, retry_after
):
    tenant = make_tenant()
    action = make_action(make_run(tenant), target="ticket-3")
    approve(action, make_user(tenant, "operator"))
    _fault(sandbox, "ticket.close", fault, count=2)
    settled(workers, action)
    attempts = list(action.attempts.order_by("number"))
    assert action.status == "succeeded"
    assert [a.status for a in attempts] == ["failed", "failed", "succeeded"]
    assert {a.error_class for a in attempts[:2]} == {"transient"}
    assert attempts[0].retry_after == retry_after
    if retry_after:
        gap = (attempts[1].started_at - attempts[0].finished_at).total_seconds()
        assert gap >= retry_after
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
    action.run.refresh_from_db()
    assert action.run.retry_count == 2


def _outage_outlasting_the_retry_window(workers, sandbox, target: str) -> Action:
    tenant = make_tenant()
    action = make_action(make_run(tenant), target=target)
    approve(action, make_user(tenant, "operator"))
    _fault(sandbox, "ticket.close", "fail_before_commit", count=5)
    settled(workers, action, timeout=60)
    return action


def test_an_outage_longer_than_the_retry_window_waits_for_an_operator_not_the_end(workers, sandbox):
    action = _outage_outlasting_the_retry_window(workers, sandbox, "ticket-4")
    action.run.refresh_from_db()
    assert (action.status, action.error_class) == ("needs_attention", "transient")
    assert action.attempts.count() == 5
    assert action.run.phase == "executing"  # not failed: a person decides
    assert not Effect.objects.filter(target="ticket-4").exists()
    key = action.idempotency_key

    endings.action_retry_now(action_pk=action.pk, user=make_user(action.tenant, "operator"))
    settled(workers, action)

    assert (action.status, action.idempotency_key) == ("succeeded", key)
    assert action.attempts.count() == 6
    assert Effect.objects.filter(idempotency_key=key).count() == 1
    assert Action.objects.filter(run=action.run).count() == 1  # no new intent, no new key


def test_giving_up_after_the_retry_window_stops_the_run_with_the_reason(workers, sandbox):
    action = _outage_outlasting_the_retry_window(workers, sandbox, "ticket-5")
    operator = make_user(action.tenant, "operator")

    endings.action_give_up(action_pk=action.pk, user=operator, reason="the desk is retired")

    action.refresh_from_db()
    action.run.refresh_from_db()
    assert (action.status, action.error_class) == ("failed", "given_up")
    assert action.run.phase == "failed"
    assert "given up by" in action.run.stop_reason
    assert "the desk is retired" in action.run.stop_reason


def test_an_unknown_target_is_invalid_and_not_retried(workers):
    tenant = make_tenant()
    action = make_action(make_run(tenant), target="ticket-999")
    approve(action, make_user(tenant, "operator"))
    settled(workers, action)
    action.run.refresh_from_db()
    assert (action.status, action.error_class, action.attempts.count()) == (
        "failed",
        "invalid_arguments",
        1,
    )
    assert action.run.phase == "failed"
    assert "invalid_arguments" in action.run.stop_reason


def test_a_key_the_external_system_holds_for_another_intent_is_a_conflict(workers, sandbox):
    tenant = make_tenant()
    action = make_action(make_run(tenant), target="ticket-5")
    requests.post(
        sandbox + "tickets/ticket-6/close",
        json={"args": {"resolution": "fixed"}},
        headers={"Idempotency-Key": action.idempotency_key},
        timeout=5,
    )
    approve(action, make_user(tenant, "operator"))
    settled(workers, action)
    action.run.refresh_from_db()
    assert (action.status, action.error_class, action.attempts.count()) == (
        "failed",
        "idempotency_conflict",
        1,
    )
    assert "idempotency_conflict" in action.run.stop_reason
    assert not Effect.objects.filter(target="ticket-5").exists()


def test_a_business_rejection_is_not_retried(workers, sandbox):
    tenant = make_tenant()
    make_policy(tenant, "payment.refund", needs_approval=False)
    charge = requests.post(
        sandbox + "payments/charges",
        headers={"Idempotency-Key": "outside-charge"},
        json={"customer": "cus_7", "amount_cents": 300, "currency": "EUR"},
        timeout=5,
    )
    charge.raise_for_status()
    refund = make_action(
        make_run(tenant),
        tool="payment.refund",
        action_id="refund",
        target=charge.json()["receipt_id"],
        args={"amount_cents": 500},
    )
    settled(workers, refund)
    refund.run.refresh_from_db()
    assert refund.status == "failed"
    assert refund.error_class == "business_rejection"
    assert refund.attempts.count() == 1


def test_a_notifier_that_commits_then_answers_503_is_not_sent_twice(workers, sandbox):
    """notify.send does not dedupe: once the request reached it, a 5xx proves nothing, so the
    outcome is unknown and goes to reconciliation; it is never retried blindly."""
    tenant = make_tenant()
    action = make_action(
        make_run(tenant),
        tool="notify.send",
        action_id="tell-cy",
        target="cy@example.com",
        args={"body": "Your refund is on its way."},
    )
    approve(action, make_user(tenant, "operator"))
    _fault(sandbox, "notify.send", "commit_then_fail")

    settled(workers, action)

    assert action.status == "uncertain"
    assert [a.status for a in action.attempts.all()] == ["uncertain"]
    assert Effect.objects.filter(tool="notify.send", target="cy@example.com").count() == 1
    sent = requests.get(
        sandbox + "notifications", params={"recipient": "cy@example.com"}, timeout=5
    ).json()
    assert len(sent["notifications"]) == 1
    assert action.cases.exists()
