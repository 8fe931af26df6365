"""Reaching people where they are: escalating a request past its SLA, and deciding through
the signed link an "approval requested" mail carries (runs.decision_links)."""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from runs.decision_links import LinkClaims
from runs.exceptions import GrantMismatch, LinkUsed, NotAllowed
from runs.models import Action, DecisionLinkUse, Escalation, Plan, ToolPolicy, notify_kinds
from runs.record.signed_rows import POLICY_ROWS
from runs.selectors import verified_policies
from runs.services import evidence
from runs.services.approvals import approval_decide
from runs.services.common import notify_approvers
from runs.services.plans import plan_decide


@transaction.atomic
def approval_escalate(*, action: Action) -> bool:
    """Once per request: tells the tool policy's escalation contacts that it has waited past
    the policy's SLA. True when it wrote the escalation (its row and its notification).

    Escalating changes nothing the approver binds to (no event, no state version): the
    request waits as before, and expiry still makes it "never approved"."""
    policy = ToolPolicy.objects.filter(tenant_id=action.tenant_id, tool=action.tool).first()
    if policy is None or policy.escalation_seconds is None or not policy.escalation_contacts:
        return False
    if not POLICY_ROWS.verifies(policy):
        return False  # a forged row's contacts hear nothing; the request still expires
    now = db_now()
    if action.created_at + timedelta(seconds=policy.escalation_seconds) > now:
        return False
    if not Action.objects.filter(pk=action.pk, status=Action.Status.WAITING_APPROVAL).exists():
        return False
    try:
        with transaction.atomic():
            Escalation.objects.create(
                tenant_id=action.tenant_id,
                action=action,
                sla_seconds=policy.escalation_seconds,
                contacts=list(policy.escalation_contacts),
                created_at=now,
            )
    except IntegrityError:
        return False  # another sweeper escalated it first
    notify_approvers(action.run, action, kind=notify_kinds.ESCALATED)
    return True


def link_only_allowed(action: Action, plan: Plan | None = None) -> bool:
    """May a link decide on this request (on a plan: on every tool of its items) without a
    logged-in session? Read from the tool policies now, so turning it off stops links
    already sent; one tool of a plan that asks for a session makes the plan ask for one."""
    tools = set(plan.items.values_list("tool", flat=True)) if plan else {action.tool}
    allowed = ToolPolicy.objects.filter(
        tenant_id=action.tenant_id, tool__in=tools, link_only_decisions=True
    )
    # Only a signed policy may waive the session: a forged row asks for one.
    return len(verified_policies(allowed)) == len(tools)


def _link_use(claims: LinkClaims, action: Action, approver, decision: str, logged_in: bool):
    """Marks the link used; LinkUsed if it was. Commits with the decision or not at all."""
    try:
        with transaction.atomic():
            DecisionLinkUse.objects.create(
                tenant_id=action.tenant_id,
                nonce=claims.nonce,
                action=action,
                approver=approver,
                decision=decision,
                logged_in=logged_in,
                used_at=db_now(),
            )
    except IntegrityError:
        raise LinkUsed("this link was already used") from None


@transaction.atomic
def decide_by_link(
    *,
    claims: LinkClaims,
    action: Action,
    approver,
    logged_in: bool,
    decision: str,
    seen_digest: str,
    seen_state_version: int,
    reason: str = "",
    seen_view: str = "",
    plan: Plan | None = None,
) -> None:
    """Records the decision a decision link's page confirmed, once per link: the link's use
    and the decision commit together, so a refused decision leaves the link unused. A link
    that names a plan (`action` is then the item its mail was about) decides the whole plan,
    the version it names, through plan_decide; any other link the action, through
    approval_decide."""
    if str(action.pk) != claims.action_pk or approver.pk != claims.approver_pk:
        raise NotAllowed("this link was sent to someone else")
    if (str(plan.pk) if plan else None) != claims.plan_pk:
        raise NotAllowed("this link names another plan")
    if plan is not None and action.plan_id != plan.pk:
        raise NotAllowed("this link names a plan its write is not part of")
    if claims.intent_digest != (plan.digest if plan else action.intent_digest):
        raise GrantMismatch("digest", "the link was sent for another version")
    if not logged_in and not link_only_allowed(action, plan):
        raise NotAllowed("a tool's policy asks you to sign in before deciding")
    _link_use(claims, action, approver, decision, logged_in)
    binding = {
        "approver": approver,
        "decision": decision,
        "seen_digest": seen_digest,
        "seen_state_version": seen_state_version,
        "seen_view": seen_view,
        "reason": reason,
        "via": evidence.DECISION_LINK_IN_SESSION if logged_in else evidence.DECISION_LINK,
    }
    if plan is not None:
        plan_decide(plan=plan, **binding)
    else:
        approval_decide(action=action, **binding)
    subject = plan or action
    kind = "plan" if plan is not None else "action"
    audit_record(
        actor=approver.get_username(),
        verb=f"{kind}.decided_by_link",
        tenant=action.tenant,
        object_type=kind,
        object_id=str(subject.pk),
        data={"decision": decision, "logged_in": logged_in, "nonce": claims.nonce},
    )
