"""Standing grants: a rule approved by the tool policy's approvers approves matching intents
at proposal, within every limit (target, argument bounds, uses, uses per hour, a cumulative
amount), counted under the rule's lock so concurrent proposals cannot pass a cap together;
anything outside a rule waits for a person, as before."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from control.models import AuditEntry
from runs.exceptions import InvalidArguments, InvalidTransition, NotAllowed
from runs.models import Action, OutboxMessage, RunEvent, StandingGrant
from runs.record.outbox import NOTIFY_JOB
from runs.services import (
    grant_check,
    standing_grant_approve,
    standing_grant_propose,
    standing_grant_revoke,
)
from tests.api.support import execute_with_receipt
from tests.factories import make_action, make_policy, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db

REFUND = "payment.refund"
CHARGE_ID = "ch_" + "a" * 32


def refunds_rule(tenant, proposer, **limits) -> StandingGrant:
    fields = {
        "name": "refunds under $50, at most 20 an hour",
        "expires_at": timezone.now() + timedelta(days=7),
        "arg_bounds": {"amount_cents": {"maximum": 5000}},
        "uses_per_hour": 20,
    }
    fields.update(limits)
    return standing_grant_propose(tenant=tenant, tool=REFUND, proposer=proposer, **fields)


def refund(tenant, cents: int, *, target: str = CHARGE_ID, action_id: str = "refund") -> Action:
    return make_action(
        make_run(tenant),
        tool=REFUND,
        target=target,
        args={"amount_cents": cents},
        action_id=action_id,
    )


def test_a_matching_intent_is_approved_by_the_rule_at_proposal_and_executes():
    tenant = make_tenant()
    rule = refunds_rule(tenant, make_user(tenant, "operator", username="rita"))
    assert rule.status == "active"

    action = refund(tenant, 1999)

    assert action.status == "approved"
    [grant] = action.approvals.all()
    assert (grant.rule, grant.approver.username) == (rule, "rita")
    assert (grant.intent_digest, grant.state_version) == (action.intent_digest, action.base_version)
    grant_check(action)
    event = RunEvent.objects.get(run=action.run, type="action.approved")
    assert event.payload["rule"] == {"id": str(rule.pk), "name": rule.name}
    assert event.actor == f"rule:{rule.pk}"
    assert not OutboxMessage.objects.filter(job=NOTIFY_JOB, action=action).exists()
    assert AuditEntry.objects.filter(verb="action.approve", object_id=str(action.pk)).exists()
    rule.refresh_from_db()
    assert (rule.uses, rule.last_used_at is not None) == (1, True)
    assert execute_with_receipt(action).status == "succeeded"


def test_an_intent_outside_any_limit_waits_for_a_person():
    tenant = make_tenant()
    rule = refunds_rule(
        tenant,
        make_user(tenant),
        target_pattern="ch_a+",
        arg_bounds={"amount_cents": {"minimum": 100, "maximum": 5000}},
        max_uses=2,
    )

    too_much = refund(tenant, 5001, action_id="too-much")
    too_little = refund(tenant, 99, action_id="too-little")
    elsewhere = refund(tenant, 1000, target="ch_" + "b" * 32, action_id="elsewhere")
    first, second = refund(tenant, 1000, action_id="first"), refund(tenant, 1000, action_id="2nd")
    third = refund(tenant, 1000, action_id="third")

    statuses = [a.status for a in (too_much, too_little, elsewhere, first, second, third)]
    assert statuses == ["waiting_approval"] * 3 + ["approved"] * 2 + ["waiting_approval"]
    assert OutboxMessage.objects.filter(job=NOTIFY_JOB, action=third).exists()
    rule.refresh_from_db()
    assert rule.uses == 2


def test_uses_per_hour_and_the_cumulative_amount_are_limits():
    tenant = make_tenant()
    hourly = refunds_rule(tenant, make_user(tenant), uses_per_hour=2)
    assert [refund(tenant, 10, action_id=f"r{n}").status for n in range(3)] == [
        "approved",
        "approved",
        "waiting_approval",
    ]
    standing_grant_revoke(rule=hourly, actor=hourly.created_by, reason="replaced by a cap")

    capped = refunds_rule(
        tenant, make_user(tenant), amount_argument="amount_cents", amount_cap=Decimal(5000)
    )
    outcomes = [refund(tenant, 2000, action_id=f"c{n}").status for n in range(3)]
    assert outcomes == ["approved", "approved", "waiting_approval"]  # 6,000 would pass 5,000
    assert refund(tenant, 1000, action_id="c-last").status == "approved"  # exactly 5,000
    capped.refresh_from_db()
    assert (capped.uses, capped.amount_used) == (3, Decimal(5000))


def test_a_revoked_or_expired_rule_admits_nothing_from_then_on():
    tenant = make_tenant()
    operator = make_user(tenant)
    rule = refunds_rule(tenant, operator)
    assert refund(tenant, 10, action_id="before").status == "approved"

    standing_grant_revoke(rule=rule, actor=operator, reason="the promotion ended")

    assert refund(tenant, 10, action_id="after").status == "waiting_approval"
    assert AuditEntry.objects.filter(verb="standing_grant.revoke", object_id=str(rule.pk)).exists()
    with pytest.raises(InvalidTransition):
        standing_grant_revoke(rule=rule, actor=operator, reason="again")

    brief = refunds_rule(tenant, operator, expires_at=timezone.now() + timedelta(seconds=1))
    time.sleep(1.1)
    assert refund(tenant, 10, action_id="late").status == "waiting_approval"
    brief.refresh_from_db()
    assert brief.uses == 0


def test_creating_a_rule_needs_the_policys_approvers_and_a_policy_may_forbid_rules():
    tenant = make_tenant()
    make_policy(tenant, REFUND, four_eyes=True, required_approvals=2)
    proposer, second, third = make_user(tenant), make_user(tenant), make_user(tenant)
    rule = refunds_rule(tenant, proposer)
    assert rule.status == "proposed"
    assert refund(tenant, 10, action_id="not-yet").status == "waiting_approval"
    with pytest.raises(NotAllowed, match="four eyes"):
        standing_grant_approve(rule=rule, approver=proposer)

    standing_grant_approve(rule=rule, approver=second)
    assert StandingGrant.objects.get(pk=rule.pk).status == "proposed"  # 1 of 2
    standing_grant_approve(rule=rule, approver=third)

    action = refund(tenant, 10, action_id="now")
    assert action.status == "approved"
    assert {g.approver for g in action.approvals.all()} == {second, third}
    grant_check(action)

    make_policy(tenant, REFUND, four_eyes=True, required_approvals=2, standing_grants_allowed=False)
    assert refund(tenant, 10, action_id="forbidden").status == "waiting_approval"
    with pytest.raises(NotAllowed, match="allows no standing rules"):
        refunds_rule(tenant, second)


def test_a_rule_whose_approver_lost_the_role_admits_nothing(django_user_model):
    tenant = make_tenant()
    operator = make_user(tenant)
    refunds_rule(tenant, operator)
    operator.memberships.all().delete()

    assert refund(tenant, 10).status == "waiting_approval"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"target_pattern": "ch_(["}, "target_pattern is not a regular expression"),
        ({"arg_bounds": {"amount": {"maximum": 5}}}, "no argument 'amount'"),
        ({"arg_bounds": {"amount_cents": {"max": 5}}}, "minimum, maximum, enum and pattern"),
        ({"arg_bounds": {"amount_cents": {"maximum": "5"}}}, "maximum must be a number"),
        ({"amount_cap": Decimal(10)}, "needs both amount_argument and amount_cap"),
        ({"amount_argument": "amount_cents", "amount_cap": Decimal(0)}, "above zero"),
        ({"max_uses": 0}, "max_uses must be at least 1"),
        ({"expires_at": timezone.now() - timedelta(seconds=1)}, "already past"),
        ({"name": " "}, "name the rule"),
    ],
)
def test_a_rule_with_a_bad_limit_is_refused_naming_it_and_nothing_is_saved(limits, message):
    tenant = make_tenant()
    with pytest.raises(InvalidArguments, match=message):
        refunds_rule(tenant, make_user(tenant), **limits)
    assert not StandingGrant.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_proposals_cannot_both_pass_a_one_use_rule():
    """Two connections propose at once under a rule with one use left: the rule's row lock
    makes one wait for the other's count, so exactly one is approved by the rule."""
    tenant = make_tenant()
    refunds_rule(tenant, make_user(tenant), max_uses=1)
    runs = [make_run(tenant), make_run(tenant)]
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def propose(run) -> None:
        try:
            start.wait()
            outcomes.append(
                make_action(
                    run,
                    tool=REFUND,
                    target=CHARGE_ID,
                    args={"amount_cents": 10},
                    action_id="refund",
                ).status
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=propose, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(outcomes) == ["approved", "waiting_approval"]
    assert StandingGrant.objects.get().uses == 1
