"""What every service shares: compare-and-set on an action's status, outbox writes, phase checks."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from django.db.models.functions import Now
from django.urls import reverse

from control.foundation.audit import audit_record
from runs.exceptions import (
    InvalidTransition,
    PlanItemAlone,
    StaleState,
)
from runs.models import (
    Action,
    OutboxMessage,
    Run,
)
from runs.record.outbox import NOTIFY_JOB, deliver_after_commit


def outbox_write(
    run: Run, *, job: str, action: Action | None = None, payload: dict | None = None
) -> OutboxMessage:
    message = OutboxMessage.objects.create(
        tenant_id=run.tenant_id, job=job, run=run, action=action, payload=payload or {}
    )
    deliver_after_commit(message.pk)
    return message


def notify_approvers(run: Run, action: Action, *, kind: str) -> OutboxMessage:
    """Tells the tenant's operators about an approval moment, after commit, through RQ."""
    return outbox_write(
        run,
        job=NOTIFY_JOB,
        action=action,
        payload={"action": str(action.pk), "kind": kind},
    )


def policy_distrusted(run: Run, action: Action, *, tool: str, problem: str) -> None:
    """Audits that `action` was frozen while its tool's policy row did not verify
    (runs.selectors.policy_for read it as the strictest policy): the row needs an admin."""
    audit_record(
        actor="countersign",
        verb="tool_policy.unverified",
        tenant=run.tenant,
        object_type="tool_policy",
        object_id=tool,
        reason=(
            f"the {tool} policy row does not verify ({problem}): {action.action_id} waits "
            "for approval under the strictest policy; save the policy again on /policies/"
        ),
        data={"run": str(run.pk), "action": str(action.pk), "problem": problem},
    )


def action_set_status(action: Action, *, expected: set[str], status: str, **fields) -> None:
    """Compare-and-set on the action's status; a count other than 1 means someone moved first."""
    updated = Action.objects.filter(pk=action.pk, status__in=expected).update(
        status=status, updated_at=Now(), **fields
    )
    if updated != 1:
        raise StaleState(f"action {action.action_id} is no longer {sorted(expected)}")
    action.status = status
    for name, value in fields.items():
        setattr(action, name, value)


def refuse_plan_item(action: Action) -> None:
    """A plan's intents are decided only with their plan, by plan_decide: approving,
    rejecting, editing or re-asking one alone would leave the others waiting on an item that
    can no longer move with them (the plan wedged for good), or send a write no one approved
    as part of the whole. Every per-item decision calls this first."""
    plan = action.plan
    if plan is None:
        return
    where = reverse("inbox_plan", args=[plan.pk])
    item = "an item" if action.position is None else f"item {action.position + 1}"
    raise PlanItemAlone(
        f"this write is {item} of {plan.size} of a plan; decide the plan as a whole at {where}",
        plan_pk=plan.pk,
    )


def without(work: list[str], action_id: str) -> list[str]:
    """The run's pending work once `action_id` is no longer pending."""
    return [item for item in work if item != action_id]


def require_phase(run: Run, phases: AbstractSet[str], doing: str) -> None:
    if run.phase not in phases:
        raise InvalidTransition(f"cannot {doing}: run is {run.phase}")
