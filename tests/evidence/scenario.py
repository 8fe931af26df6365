"""A tenant with one of every kind of decision, for the evidence tests: approved and
executed, edited then approved, rejected, expired, approved by a standing rule, a plan, and
a write whose outcome was unknown until a reconciler resolved it with evidence."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from control.models import Tenant
from reconciliation.services import case_resolve
from runs.models import Action, Plan
from runs.services import action_edit_and_approve, standing_grant_propose
from tests.api.support import execute_with_receipt
from tests.factories import (
    approve,
    approve_plan,
    expire,
    make_action,
    make_notify_plan,
    make_run,
    make_tenant,
    make_user,
    reject,
    set_policy,
)
from tests.reconciliation.test_cases import make_uncertain, probe_until_settled


@dataclass
class Scenario:
    tenant: Tenant
    approved: Action
    edited: Action
    rejected: Action
    expired: Action
    by_rule: Action
    plan: Plan
    reconciled: Action


def every_kind_of_decision() -> Scenario:
    """Needs the sandbox (tests.processes.sandbox): the case's probes read it."""
    tenant = make_tenant()
    olga = make_user(tenant, "operator", username="olga")
    rita = make_user(tenant, "operator", "reconciler", username="rita")

    approved = make_action(make_run(tenant), action_id="close-1", target="ticket-1")
    approve(approved, olga)
    execute_with_receipt(approved, receipt_id="rcpt-approved")

    original = make_action(make_run(tenant), action_id="close-2", target="ticket-2")
    edited = action_edit_and_approve(
        action=original,
        editor=olga,
        args={"resolution": "duplicate"},
        seen_digest=original.intent_digest,
        seen_state_version=original.base_version,
        reason="it was a duplicate",
    )
    execute_with_receipt(edited, receipt_id="rcpt-edited")

    rejected = make_action(make_run(tenant), action_id="close-3", target="ticket-3")
    reject(rejected, olga, reason="the customer has not confirmed")

    set_policy(tenant, "notify.send", approval_seconds=1)
    expired = make_action(
        make_run(tenant), tool="notify.send", action_id="tell", target="ops", args={"body": "hi"}
    )
    expire(expired)

    standing_grant_propose(
        tenant=tenant,
        tool="payment.refund",
        proposer=olga,
        name="refunds under $50",
        expires_at=timezone.now() + timedelta(days=7),
        arg_bounds={"amount_cents": {"maximum": 5000}},
    )
    by_rule = make_action(
        make_run(tenant),
        tool="payment.refund",
        target="ch_" + "a" * 32,
        args={"amount_cents": 1999},
        action_id="refund",
    )
    execute_with_receipt(by_rule, receipt_id="rcpt-rule")

    set_policy(tenant, "notify.send")
    plan = make_notify_plan(tenant, goal="tell the team", bodies={"a@example.com": "done"})
    approve_plan(plan, olga)

    # A message the probes cannot find by key (notify.send is not queryable): a person decides.
    reconciled = make_action(
        make_run(tenant),
        tool="notify.send",
        action_id="tell-bo",
        target="bo@example.com",
        args={"body": "Your parcel left the depot."},
    )
    approve(reconciled, olga)
    case = probe_until_settled(make_uncertain(reconciled))
    assert case.status == "open", case.findings
    case_resolve(
        case=case,
        user=rita,
        resolution="applied",
        note="Bo confirmed the message on the phone",
        evidence={"receipt_id": "rcpt-by-hand"},
    )
    reconciled.refresh_from_db()
    return Scenario(tenant, approved, edited, rejected, expired, by_rule, plan, reconciled)
