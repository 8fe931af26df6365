"""A database writer without the signing key cannot get a write executed that nobody
approved: a plan's items are signed as a whole, and no checkpoint launders an edited row.

Each test tampers as SECURITY.md's database-only attacker would (plain SQL on the rows, the
digests recomputed so that every plain hash fits), then lets real worker processes run."""

from __future__ import annotations

import json

import pytest
from django.db import connection, transaction

from control.foundation.canonical import intent_digest
from control.models import AuditEntry
from runs.models import Action, Approval, Run
from runs.record.events import append_event
from runs.record.verification import run_verify
from runs.services import PlanItem, approval_decide, plan_propose, tool_policy_set
from sandbox.models import Effect
from tests.factories import (
    approve_plan,
    make_action,
    make_observation,
    make_run,
    make_tenant,
    make_user,
)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

HUGE = 99_999_999


def approved_charges(tenant, amounts: list[int]):
    run = make_run(tenant, goal="charge the two invoices")
    plan, _ = plan_propose(
        run=run,
        items=[
            PlanItem(
                f"charge-{n}",
                "payment.charge",
                f"cus_{n}",
                {"amount_cents": amount, "currency": "EUR"},
            )
            for n, amount in enumerate(amounts, start=1)
        ],
        observation=make_observation(run, summary="two invoices due"),
        proposed_by="agent-token",
    )
    approve_plan(plan, make_user(tenant, "operator"))
    return run, list(plan.items.order_by("position"))


def rewrite_args(action: Action, args: dict) -> str:
    """The attacker's edit: new arguments, the digest recomputed to fit, and the grant's
    digest with it. Plain SQL, as a database account would."""
    digest = intent_digest(tool=action.tool, target=action.target, args=args)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_action SET args = %s, intent_digest = %s WHERE id = %s",
            [json.dumps(args), digest, action.pk],
        )
        cursor.execute(
            "UPDATE runs_approval SET intent_digest = %s WHERE action_id = %s", [digest, action.pk]
        )
    return digest


def charged() -> list[int]:
    return sorted(Effect.objects.filter(tool="payment.charge").values_list("target", flat=True))


def test_a_later_plan_item_edited_after_approval_is_never_sent_and_the_run_stops(workers):
    tenant = make_tenant()
    run, (first, second) = approved_charges(tenant, [1200, 3400])
    rewrite_args(second, {"amount_cents": HUGE, "currency": "EUR"})

    assert workers.run_burst() == 0

    assert charged() == ["cus_1"]  # the approved first item only; never the edited second
    second.refresh_from_db()
    run.refresh_from_db()
    assert second.status == "cancelled"
    assert run.phase == Run.Phase.FAILED
    assert "differ from the signed checkpoint" in run.stop_reason
    refused = AuditEntry.objects.get(verb="action.refused_unsigned", object_id=str(run.pk))
    assert any("plan's items differ" in line for line in refused.data["differences"])
    assert Action.objects.get(pk=first.pk).status == "succeeded"  # its receipt was kept


def test_verify_run_reports_a_plan_item_edited_while_it_waits_its_turn():
    tenant = make_tenant()
    run, (_, second) = approved_charges(tenant, [1200, 3400])
    run.refresh_from_db()
    assert run_verify(run) == []

    rewrite_args(second, {"amount_cents": HUGE, "currency": "EUR"})

    run.refresh_from_db()
    problems = run_verify(run)
    assert any("plan's items from position 0 differ" in line for line in problems), problems


def test_a_grant_inserted_beside_a_real_one_is_not_signed_and_nothing_is_sent(workers):
    """Two approvals required; an intruder inserts the second one. Counting rows, the real
    operator's approval completed the pair and the checkpoint signed both: the worker sent."""
    tenant = make_tenant()
    tool_policy_set(
        tenant=tenant,
        tool="payment.charge",
        needs_approval=True,
        four_eyes=False,
        required_approvals=2,
        approval_seconds=3600,
        actor="admin",
    )
    intruder, operator = make_user(tenant, "operator"), make_user(tenant, "operator")
    action = make_action(
        make_run(tenant),
        action_id="charge-9",
        tool="payment.charge",
        target="cus_9",
        args={"amount_cents": 500, "currency": "EUR"},
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runs_approval (id, tenant_id, action_id, decision, approver_id, reason,"
            " intent_digest, state_version, target_scope, expires_at, created_at, plan_digest)"
            " SELECT gen_random_uuid(), tenant_id, id, 'approve', %s, '', intent_digest,"
            " base_version, target, expires_at, now(), '' FROM runs_action WHERE id = %s",
            [intruder.pk, action.pk],
        )
    run = action.run
    run.refresh_from_db()
    with transaction.atomic():  # and the event a grant appends (plain hashes, no key needed)
        append_event(run, type="approval.granted", actor=intruder.username, action=action)

    approval_decide(
        action=action,
        approver=operator,
        decision="approve",
        seen_digest=action.intent_digest,
        seen_state_version=action.base_version,
    )
    assert workers.run_burst() == 0

    assert charged() == []
    run.refresh_from_db()
    assert run.phase == Run.Phase.FAILED
    refused = AuditEntry.objects.get(verb="action.refused_unsigned", object_id=str(run.pk))
    assert any(
        "grants in the rows are not the ones signed" in d for d in refused.data["differences"]
    )


def test_a_single_intent_edited_while_waiting_is_refused_when_an_operator_approves_it():
    tenant = make_tenant()
    action = make_action(
        make_run(tenant),
        tool="payment.charge",
        target="cus_3",
        args={"amount_cents": 700, "currency": "EUR"},
    )
    digest = rewrite_args(action, {"amount_cents": HUGE, "currency": "EUR"})
    action.refresh_from_db()

    approval_decide(
        action=action,
        approver=make_user(tenant, "operator"),
        decision="approve",
        seen_digest=digest,
        seen_state_version=action.base_version,
    )

    action.refresh_from_db()
    run = action.run
    run.refresh_from_db()
    # The approval is kept as evidence, but nothing of the edited intent was signed: the run
    # stopped for a person and the action can never be sent.
    assert Approval.objects.filter(action=action).exists()
    assert action.status == "cancelled"
    assert run.phase == Run.Phase.FAILED
    assert "changed since signed" in run.stop_reason
