"""A worker executes only what was signed: rows changed in the database without the checkpoint
key (forged approvals, changed arguments with recomputed digests) are refused before the send,
the run stops for a person, the refusal is audited, and verify_run names the difference."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.utils import timezone

from control.foundation.canonical import intent_digest
from control.models import AuditEntry
from runs.models import Action, Approval
from runs.record.verification import run_verify
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def assert_refused_and_nothing_sent(action: Action, tool: str) -> None:
    action.refresh_from_db()
    action.run.refresh_from_db()
    assert Effect.objects.filter(tool=tool).count() == 0
    assert action.attempts.count() == 0
    assert action.run.phase == "failed"
    assert "differs from its signed checkpoint" in action.run.stop_reason
    refusal = AuditEntry.objects.get(verb="action.refused_unsigned", object_id=str(action.pk))
    assert refusal.data["differences"]


def test_an_amount_changed_in_the_database_with_matching_digests_is_never_charged(workers):
    tenant = make_tenant()
    action = make_action(
        make_run(tenant),
        tool="payment.charge",
        action_id="charge-order-9",
        target="cus_42",
        args={"amount_cents": 500, "currency": "EUR"},
    )
    approve(action, make_user(tenant, "operator"))
    # The attacker writes the database, recomputing every plain hash, but holds no key.
    forged_args = {"amount_cents": 99_999_999, "currency": "EUR"}
    forged = intent_digest(tool="payment.charge", target="cus_42", args=forged_args)
    Action.objects.filter(pk=action.pk).update(args=forged_args, intent_digest=forged)
    Approval.objects.filter(action=action).update(intent_digest=forged)

    problems = run_verify(action.run)
    assert any("args is" in problem and "99999999" in problem for problem in problems)
    assert workers.run_burst() == 0

    assert_refused_and_nothing_sent(action, "payment.charge")


def test_a_forged_approval_row_is_never_executed(workers):
    tenant = make_tenant()
    action = make_action(make_run(tenant), target="ticket-11")
    operator = make_user(tenant, "operator")
    Approval.objects.create(
        tenant=tenant,
        action=action,
        decision="approve",
        approver=operator,
        intent_digest=action.intent_digest,
        state_version=action.base_version,
        target_scope=action.target,
        expires_at=action.expires_at,
        created_at=timezone.now(),
    )
    Action.objects.filter(pk=action.pk).update(status="approved", next_attempt_at=timezone.now())

    assert any("the grants are" in problem for problem in run_verify(action.run))
    call_command("sweep", verbosity=0)  # queues a drain for the now "due" action
    assert workers.run_burst() == 0

    assert_refused_and_nothing_sent(action, "ticket.close")


def test_an_untouched_approved_write_still_runs(workers):
    tenant = make_tenant()
    action = make_action(make_run(tenant), target="ticket-12")
    approve(action, make_user(tenant, "operator"))
    assert run_verify(action.run) == []
    assert workers.run_burst() == 0
    action.refresh_from_db()
    assert action.status == "succeeded"
    assert Effect.objects.filter(target="ticket-12").count() == 1
