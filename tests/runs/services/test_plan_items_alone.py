"""The services refuse to decide a plan's intent on its own (issue 27): the rule lives here, the
edges only translate it. Edit then approve once pulled an item out of its plan, approved it
alone and left the rest waiting for good."""

from __future__ import annotations

import pytest
from django.db import transaction

from runs.exceptions import IntentConflict, PlanItemAlone
from runs.models import Action, Approval, Plan
from runs.services import (
    PlanItem,
    action_ask_again,
    action_edit_and_approve,
    action_propose,
    approval_decide,
    plan_propose,
)
from runs.services.standing import standing_grant_apply, standing_rules_matching
from tests.api.support import execute_with_receipt
from tests.factories import make_observation, make_run, make_tenant, make_user
from tests.runs.services.test_plans import decide
from tests.runs.services.test_standing import REFUND, refunds_rule

pytestmark = pytest.mark.django_db


def refunds_plan(tenant) -> Plan:
    run = make_run(tenant)
    items = [
        PlanItem(
            action_id=f"refund-{n}",
            tool=REFUND,
            target="ch_" + f"{n:032x}",
            args={"amount_cents": 100 * n},
        )
        for n in (1, 2)
    ]
    plan, _ = plan_propose(
        run=run, items=items, observation=make_observation(run), proposed_by="agent-token"
    )
    return plan


def second(plan: Plan) -> Action:
    return plan.items.get(position=1)


def assert_approved_as_a_whole_and_executed(plan: Plan, approver) -> None:
    """The plan is still decidable as one, and then every item executes in order."""
    assert decide(plan, approver).status == "approved"
    for number, item in enumerate(plan.items.order_by("position"), start=1):
        assert execute_with_receipt(item, receipt_id=f"rcpt-{number}").status == "succeeded"
    plan.run.refresh_from_db()
    assert plan.run.phase == "running"


def assert_untouched_and_decidable(plan: Plan, approver) -> None:
    plan.refresh_from_db()
    assert plan.status == "waiting_approval"
    assert set(plan.items.values_list("status", flat=True)) == {"waiting_approval"}
    assert Action.objects.filter(run=plan.run).count() == 2
    assert not Approval.objects.filter(action__plan=plan).exists()
    assert_approved_as_a_whole_and_executed(plan, approver)


def test_edit_then_approve_refuses_a_plan_item_and_the_plan_still_executes():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    plan = refunds_plan(tenant)
    item = second(plan)

    with pytest.raises(PlanItemAlone, match=f"item 2 of 2 of a plan.*/inbox/plans/{plan.pk}/"):
        action_edit_and_approve(
            action=item,
            editor=operator,
            args={"amount_cents": 150},
            seen_digest=item.intent_digest,
            seen_state_version=item.base_version,
        )

    assert_untouched_and_decidable(plan, operator)


def test_approving_or_asking_again_for_one_item_is_refused_with_the_plan_named():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    plan = refunds_plan(tenant)
    item = second(plan)

    for decision in ("approve", "reject"):
        with pytest.raises(PlanItemAlone) as refused:
            approval_decide(
                action=item,
                approver=operator,
                decision=decision,
                seen_digest=item.intent_digest,
                seen_state_version=item.base_version,
                reason="one alone",
            )
        assert refused.value.plan_pk == plan.pk
    with pytest.raises(PlanItemAlone):
        action_ask_again(action=item, requester=operator)

    assert_untouched_and_decidable(plan, operator)


def test_a_standing_rule_never_approves_a_plan_item_alone():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    rule = refunds_rule(tenant, make_user(tenant, "operator", username="rita"))
    plan = refunds_plan(tenant)
    item = second(plan)

    matches = standing_rules_matching(
        tenant_id=tenant.pk, tool=item.tool, target=item.target, args=item.args
    )
    assert [match.pk for match in matches] == [rule.pk]  # the rule admits the item's values
    with pytest.raises(PlanItemAlone), transaction.atomic():
        standing_grant_apply(plan.run, item, allowed=True, matches=matches)

    rule.refresh_from_db()
    assert rule.uses == 0
    assert_untouched_and_decidable(plan, operator)


def test_proposing_a_plan_items_id_as_a_single_intent_never_pulls_it_out():
    """The agent's path (API and MCP both propose through action_propose): the same intent
    again is the plan's item, still in its plan; other arguments are a conflict."""
    tenant = make_tenant()
    plan = refunds_plan(tenant)
    item = second(plan)
    same = {"tool": item.tool, "target": item.target, "contract_version": "v1"}

    again, created = action_propose(
        run=plan.run, action_id=item.action_id, args=item.args, proposed_by="agent", **same
    )
    with pytest.raises(IntentConflict):
        action_propose(
            run=plan.run,
            action_id=item.action_id,
            args={"amount_cents": 1},
            proposed_by="agent",
            **same,
        )

    assert (again.pk, again.plan_id, created) == (item.pk, plan.pk, False)
    assert_untouched_and_decidable(plan, make_user(tenant, "operator"))
