"""Plans: one decision for an exact set of frozen intents, each executed under its own key,
one at a time and in order; an item in doubt holds back the rest until a person settles it."""

from __future__ import annotations

import time

import pytest
from django.db.models.functions import Now

from control.foundation.canonical import canonical_json, content_hash
from reconciliation.services import case_resolve
from runs.exceptions import GrantMismatch, IntentConflict, InvalidArguments, InvalidTransition
from runs.execution.sweep import ONE_PER_REQUEST
from runs.models import Action, Approval, OutboxMessage, Plan
from runs.record.outbox import NOTIFY_JOB
from runs.record.verification import run_verify
from runs.selectors import ready_actions
from runs.services import (
    PlanItem,
    approval_decide,
    grant_check,
    plan_decide,
    plan_expire,
    plan_propose,
    plan_revise,
)
from tests.api.support import execute_with_receipt, make_uncertain_with_case
from tests.factories import (
    make_action,
    make_observation,
    make_policy,
    make_run,
    make_tenant,
    make_user,
)
from tests.reconciliation.test_cases import probe_until_settled

pytestmark = pytest.mark.django_db


def notices(count: int, *, body: str = "ticket-7 is closed") -> list[PlanItem]:
    return [
        PlanItem(
            action_id=f"notify-{n}",
            tool="notify.send",
            target=f"ops{n}@example.com",
            args={"body": body},
        )
        for n in range(1, count + 1)
    ]


def proposed(tenant, count: int = 3, **options) -> Plan:
    run = make_run(tenant)
    plan, created = plan_propose(
        run=run,
        items=notices(count, **options),
        observation=make_observation(run),
        proposed_by="agent-token",
    )
    assert created
    return plan


def decide(plan: Plan, person, decision: str = "approve", reason: str = "") -> Plan:
    return plan_decide(
        plan=plan,
        approver=person,
        decision=decision,
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
        reason=reason,
    )


def items(plan: Plan) -> list[Action]:
    return list(plan.items.order_by("position"))


def test_a_plan_freezes_each_intent_under_its_own_key_and_one_digest_over_them():
    tenant = make_tenant()
    plan = proposed(tenant)

    frozen = items(plan)
    assert [a.action_id for a in frozen] == ["notify-1", "notify-2", "notify-3"]
    assert all(a.status == "waiting_approval" for a in frozen)
    assert {a.base_version for a in frozen} == {plan.base_version}
    assert plan.digest == content_hash(canonical_json(sorted(a.intent_digest for a in frozen)))
    assert len({a.idempotency_key for a in frozen}) == 3
    plan.run.refresh_from_db()
    assert plan.run.phase == "waiting_approval"
    assert plan.run.pending_work[:3] == ["notify-1", "notify-2", "notify-3"]
    assert OutboxMessage.objects.filter(job=NOTIFY_JOB).count() == 1  # one request, not three
    assert run_verify(plan.run) == []


def test_the_same_plan_again_is_the_same_plan_and_bad_plans_are_refused_naming_the_item():
    tenant = make_tenant()
    plan = proposed(tenant)
    run = plan.run
    observation = plan.observation

    again, created = plan_propose(
        run=run, items=notices(3), observation=observation, proposed_by="agent-token"
    )
    assert (again, created) == (plan, False)
    with pytest.raises(IntentConflict, match="notify-1"):
        plan_propose(
            run=run,
            items=notices(3, body="other"),
            observation=observation,
            proposed_by="agent-token",
        )
    bad = [*notices(1), PlanItem("notify-9", "notify.send", "not an address", {"body": "x"})]
    with pytest.raises(InvalidArguments, match=r"intents\[1\]"):
        plan_propose(run=make_run(tenant), items=bad, observation=None, proposed_by="a")
    with pytest.raises(InvalidArguments, match="1 to 1000"):
        plan_propose(run=make_run(tenant), items=[], observation=None, proposed_by="a")
    with pytest.raises(InvalidTransition, match="waiting_approval"):
        make_action(
            run,
            tool="notify.send",
            target="x@example.com",
            args={"body": "hi"},
            action_id="single",
            observation=observation,
        )
    assert Plan.objects.count() == 1


def test_one_approval_grants_every_item_bound_to_its_digest_and_the_plans():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    plan = proposed(tenant)
    with pytest.raises(InvalidTransition, match="decide the plan as a whole"):
        approval_decide(
            action=items(plan)[0],
            approver=operator,
            decision="approve",
            seen_digest=items(plan)[0].intent_digest,
            seen_state_version=plan.base_version,
        )

    decide(plan, operator)

    frozen = items(plan)
    assert {a.status for a in frozen} == {"approved"}
    grants = Approval.objects.filter(action__plan=plan)
    assert grants.count() == 3
    assert {(g.plan_digest, g.state_version) for g in grants} == {(plan.digest, plan.base_version)}
    for action in frozen:
        assert action.approvals.get().intent_digest == action.intent_digest
    grant_check(frozen[0])
    assert list(ready_actions().filter(plan=plan)) == [frozen[0]]  # one at a time, in order
    plan.run.refresh_from_db()
    assert plan.run.phase == "executing"
    assert run_verify(plan.run) == []


def test_the_items_execute_in_order_each_with_its_own_receipt_and_the_run_verifies():
    tenant = make_tenant()
    plan = proposed(tenant)
    decide(plan, make_user(tenant, "operator"))

    for number, action in enumerate(items(plan), start=1):
        assert list(ready_actions().filter(plan=plan)) == [action]
        assert execute_with_receipt(action, receipt_id=f"ntf_{number}").status == "succeeded"
        plan.run.refresh_from_db()
        assert plan.run.phase == ("executing" if number < 3 else "running")
        assert run_verify(plan.run) == []

    assert [a.receipt.receipt_id for a in items(plan)] == ["ntf_1", "ntf_2", "ntf_3"]
    assert plan.run.pending_work == []


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_an_item_in_doubt_holds_back_the_rest_until_it_is_resolved(sandbox):
    tenant = make_tenant()
    plan = proposed(tenant)
    decide(plan, make_user(tenant, "operator"))
    first, second, third = items(plan)
    execute_with_receipt(first, receipt_id="ntf_1")

    # The notifier never saw it: the probes prove nothing, and the case waits for a person.
    case = probe_until_settled(make_uncertain_with_case(second))
    assert case.status == "open"

    assert not ready_actions().filter(plan=plan).exists()
    plan.run.refresh_from_db()
    assert plan.run.phase == "waiting_reconciliation"
    case_resolve(
        case=case,
        user=make_user(tenant, "reconciler"),
        resolution="applied",
        note="listed by the notifier",
        evidence={"receipt_id": "ntf_2", "intent_digest": second.intent_digest},
    )
    assert list(ready_actions().filter(plan=plan)) == [third]
    plan.run.refresh_from_db()
    assert plan.run.phase == "executing"
    assert execute_with_receipt(third, receipt_id="ntf_3").status == "succeeded"
    plan.run.refresh_from_db()
    assert plan.run.phase == "running"
    assert run_verify(plan.run) == []


def test_a_rejection_or_an_expiry_ends_every_item_and_n_of_m_counts_people():
    tenant = make_tenant()
    first_person, second_person = make_user(tenant, "operator"), make_user(tenant, "operator")
    rejected = decide(proposed(tenant), first_person, "reject", "wrong list")
    assert {a.status for a in items(rejected)} == {"rejected"}
    assert {a.decision_reason for a in items(rejected)} == {"wrong list"}
    rejected.run.refresh_from_db()
    assert rejected.run.phase == "running"

    make_policy(tenant, "notify.send", required_approvals=2)
    plan = proposed(tenant)
    decide(plan, first_person)
    assert {a.status for a in items(plan)} == {"waiting_approval"}
    with pytest.raises(GrantMismatch, match="changed since you looked"):
        plan_decide(
            plan=plan,
            approver=second_person,
            decision="approve",
            seen_digest=plan.digest,
            seen_state_version=plan.base_version - 1,
        )
    decide(plan, second_person)
    assert {a.status for a in items(plan)} == {"approved"}
    grant_check(items(plan)[0])

    make_policy(tenant, "notify.send", required_approvals=1, approval_seconds=1)
    lapsing = proposed(tenant)
    time.sleep(1.1)
    assert plan_expire(plan=lapsing)
    assert {a.status for a in items(lapsing)} == {"expired"}
    with pytest.raises(InvalidTransition):
        decide(lapsing, first_person)
    lapsing.run.refresh_from_db()
    assert lapsing.run.phase == "running"
    assert run_verify(lapsing.run) == []


def test_dropping_intents_makes_a_new_version_with_a_new_digest_that_is_decided_alone():
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    plan = proposed(tenant)
    first, second, third = items(plan)

    revised = plan_revise(
        plan=plan,
        editor=operator,
        drop=[str(second.pk)],
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
        reason="ops2 left the company",
    )

    plan.refresh_from_db()
    second.refresh_from_db()
    assert (plan.status, revised.size, revised.supersedes) == ("superseded", 2, plan)
    assert revised.digest == content_hash(
        canonical_json(sorted([first.intent_digest, third.intent_digest]))
    )
    assert second.status == "cancelled"
    assert "ops2 left the company" in second.decision_reason
    with pytest.raises(InvalidTransition, match="superseded"):
        decide(plan, operator)
    decide(revised, operator)
    kept = items(revised)
    assert [a.action_id for a in kept] == ["notify-1", "notify-3"]
    for number, action in enumerate(kept, start=1):
        assert execute_with_receipt(action, receipt_id=f"ntf_{number}").status == "succeeded"
    revised.run.refresh_from_db()
    assert revised.run.phase == "running"
    assert run_verify(revised.run) == []


def test_a_revision_is_refused_after_a_decision_began_or_when_it_would_drop_everything():
    tenant = make_tenant()
    make_policy(tenant, "notify.send", required_approvals=2)
    operator = make_user(tenant, "operator")
    plan = proposed(tenant, 2)
    everything = [str(a.pk) for a in items(plan)]

    def revise(drop):
        return plan_revise(
            plan=plan,
            editor=operator,
            drop=drop,
            seen_digest=plan.digest,
            seen_state_version=plan.base_version,
            reason="not these",
        )

    with pytest.raises(InvalidArguments, match="reject it"):
        revise(everything)
    with pytest.raises(InvalidArguments, match="choose intents"):
        revise(["not-an-item"])
    decide(plan, operator)  # one of two approvals
    with pytest.raises(InvalidTransition, match="already decided"):
        revise(everything[:1])
    assert Plan.objects.count() == 1


def test_dropping_intents_of_a_long_plan_numbers_the_rest_again_whatever_order_rows_come_in():
    tenant = make_tenant()
    plan = proposed(tenant, count=40)
    dropped = items(plan)[:3]
    # Rewritten last to first, the rows lie in the table in reverse: a statement that scans
    # them meets the highest positions first.
    for item in reversed(items(plan)):
        Action.objects.filter(pk=item.pk).update(updated_at=Now())

    revised = plan_revise(
        plan=plan,
        editor=make_user(tenant, "operator"),
        drop=[str(item.pk) for item in dropped],
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
        reason="three of them were told already",
    )

    kept = [(a.action_id, a.position) for a in items(revised)]
    assert kept == [(f"notify-{n}", n - 4) for n in range(4, 41)]


def test_dropping_the_first_intent_leaves_the_new_version_a_first_one_to_tell_people_about():
    tenant = make_tenant()
    plan = proposed(tenant)
    first = items(plan)[0]

    revised = plan_revise(
        plan=plan,
        editor=make_user(tenant, "operator"),
        drop=[str(first.pk)],
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
        reason="ops1 asked not to be told",
    )

    assert [(a.action_id, a.position) for a in items(revised)] == [("notify-2", 0), ("notify-3", 1)]
    # The sweep warns and escalates once per plan, through its item at position 0.
    told = Action.objects.filter(ONE_PER_REQUEST, plan=revised)
    assert [a.action_id for a in told] == ["notify-2"]
