"""Grants: a decision bound to a digest and a state version, the check before a send, expiry."""

from __future__ import annotations

from django.db import transaction

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from control.foundation.tenancy import APPROVER_ROLES, roles_of_members
from runs.exceptions import (
    GrantMismatch,
)
from runs.models import (
    Action,
    Approval,
    OutboxMessage,
    Run,
    RunEvent,
    notify_kinds,
)
from runs.record.authored import authored
from runs.record.events import append_event
from runs.record.outbox import EXECUTE_JOB, NOTIFY_JOB
from runs.record.payloads import action_approved
from runs.services import evidence
from runs.services.common import (
    action_set_status,
    notify_approvers,
    outbox_write,
    without,
)
from runs.services.deciding import grants_write, request_check, run_unchanged_since_proposal
from runs.services.runs import checkpoint_or_stop

Phase = Run.Phase
Status = Action.Status


@transaction.atomic
def approval_decide(
    *,
    action: Action,
    approver,
    decision: str,
    seen_digest: str,
    seen_state_version: int,
    reason: str = "",
    seen_view: str = "",
    via: str = evidence.SESSION,
    edited_from: dict | None = None,
) -> Approval:
    """Records one person's decision on exactly the intent they saw (digest and version,
    and the view's digest where a page showed one): request_check, then the grant and what
    it moves, then the decision receipt. `via` says how the approver signed in
    (runs.services.evidence)."""
    checked = request_check(
        action,
        approver,
        decision=decision,
        seen_digest=seen_digest,
        seen_state_version=seen_state_version,
        reason=reason,
    )
    view = evidence.view_check(checked, seen_view)
    action, run, now = checked.request, checked.run, checked.now
    (approval,) = grants_write(checked, approver, decision=decision, reason=reason)
    approvals = len(checked.granted) + 1
    authored([approval.pk])
    actor = approver.get_username()
    if decision == Approval.Decision.REJECT:
        action_set_status(
            action,
            expected={Status.WAITING_APPROVAL},
            status=Status.REJECTED,
            decision_reason=reason,
        )
        append_event(
            run,
            type="action.rejected",
            actor=actor,
            action=action,
            payload={"reason": reason},
            changes={
                "phase": Phase.RUNNING,
                "pending_work": without(run.pending_work, action.action_id),
            },
        )
    elif approvals >= action.required_approvals:
        action_set_status(
            action, expected={Status.WAITING_APPROVAL}, status=Status.APPROVED, next_attempt_at=now
        )
        append_event(run, actor=actor, action=action, **action_approved(approvals=approvals))
        outbox_write(run, job=EXECUTE_JOB, action=action)
    else:
        append_event(
            run,
            type="approval.granted",
            actor=actor,
            action=action,
            payload={"approvals": approvals, "required": action.required_approvals},
        )
    checkpoint_or_stop(run)
    entry = audit_record(
        actor=actor,
        verb=f"action.{decision}",
        tenant=run.tenant,
        object_type="action",
        object_id=str(action.pk),
        reason=reason,
        data={"intent_digest": action.intent_digest, "state_version": seen_state_version},
    )
    evidence.decision_stated(
        checked,
        view=view,
        seen_view=seen_view,
        decision=decision,
        decider=evidence.person(approver, via),
        reason=reason,
        entry=entry,
        edited_from=edited_from,
    )
    return approval


def grant_check(action: Action) -> None:
    """Is the grant valid for this exact intent now? Raises GrantMismatch naming the broken
    binding. A missing or malformed field is never approval."""
    if not action.needs_approval:
        return
    run = action.run
    decisions = list(action.approvals.all())
    roles = roles_of_members([grant.approver_id for grant in decisions], [run.tenant_id])
    problem = grant_problem(
        action,
        decisions,
        roles=roles,
        now=db_now(),
        own_events=own_events_since_proposal(action).count(),
    )
    if problem is not None:
        raise problem


def own_events_since_proposal(action: Action):
    """The run's events since the intent's base that are its own: its grants and attempts;
    a plan's items share their base, so every event of the plan since then is its own."""
    since = RunEvent.objects.filter(run_id=action.run_id, seq__gt=action.base_event_seq)
    if action.plan_id is None:
        return since.filter(action=action)
    return since.filter(action__plan_id=action.plan_id)


def grant_problem(
    action: Action, decisions: list, *, roles: dict, now, own_events: int
) -> GrantMismatch | None:
    """The grant rules of DESIGN.md's protocol step 2 over rows already read; no queries.
    `roles` is roles_of_members of the approvers; `own_events` counts
    own_events_since_proposal. None when the grants bind exactly this intent now."""
    if not action.needs_approval:
        return None
    if any(d.decision != Approval.Decision.APPROVE for d in decisions):
        return GrantMismatch("decision", "the intent was rejected")
    approvers = set()
    plan = action.plan
    for grant in decisions:
        if not grant.intent_digest or grant.intent_digest != action.intent_digest:
            return GrantMismatch("digest", "a grant is bound to another intent")
        if plan is not None and (not grant.plan_digest or grant.plan_digest != plan.digest):
            return GrantMismatch("plan", "a grant is bound to another plan")
        if grant.state_version is None or grant.state_version != action.base_version:
            return GrantMismatch("state_version", "a grant names another state version")
        if not grant.target_scope or grant.target_scope != action.target:
            return GrantMismatch("scope", "the target is outside a grant's scope")
        if grant.expires_at is None or grant.expires_at <= now:
            return GrantMismatch("expired", "a grant has expired")
        held = roles.get((grant.approver_id, action.run.tenant_id), frozenset())
        if not held & frozenset(APPROVER_ROLES):
            return GrantMismatch("role", "an approver does not hold the operator role here")
        if action.four_eyes and grant.approver_id == action.proposed_by_user_id:
            return GrantMismatch("four_eyes", "the proposer approved their own intent")
        approvers.add(grant.approver_id)
    if len(approvers) < action.required_approvals:
        return GrantMismatch(
            "approvals", f"{len(approvers)} of {action.required_approvals} approvals"
        )
    if not run_unchanged_since_proposal(run=action.run, action=action, own_events=own_events):
        return GrantMismatch("state_version", "the run changed after the intent was approved")
    return None


@transaction.atomic
def approval_expire(*, action: Action) -> bool:
    """Marks an unanswered request expired (never approved); True when it did."""
    run = action.run
    if action.plan_id is not None:
        return False  # a plan expires as a whole: runs.services.plans.plan_expire
    if action.status != Status.WAITING_APPROVAL:
        return False
    if action.expires_at is not None and action.expires_at > db_now():
        return False  # a request without an expiry cannot be approved: it expires
    action_set_status(action, expected={Status.WAITING_APPROVAL}, status=Status.EXPIRED)
    evidence.never_sent_stated([action], run=run, status=Status.EXPIRED)
    notify_approvers(run, action, kind=notify_kinds.EXPIRED)
    append_event(
        run,
        type="action.expired",
        actor="countersign",
        action=action,
        changes={
            "phase": Phase.RUNNING,
            "pending_work": without(run.pending_work, action.action_id),
        },
    )
    checkpoint_or_stop(run)
    return True


def approval_warn_expiring(*, action: Action) -> bool:
    """Once per request: tells operators it is about to expire. True when it wrote."""
    already = OutboxMessage.objects.filter(
        action=action, job=NOTIFY_JOB, payload__kind=notify_kinds.EXPIRING
    ).exists()
    if already or action.status != Status.WAITING_APPROVAL:
        return False
    notify_approvers(action.run, action, kind=notify_kinds.EXPIRING)
    return True
