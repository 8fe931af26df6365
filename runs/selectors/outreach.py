"""Reads for escalations and decision links."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from runs.models import Action, DecisionLinkUse, ToolPolicy
from runs.selectors.plans import PlanSummary, plan_summary


def escalations_due() -> QuerySet[Action]:
    """Requests still waiting past their tool policy's SLA that were never escalated.

    Each policy with an SLA adds its own `created_at <= now() - SLA` (a constant interval per
    policy), so the database never multiplies a column by an interval: PostgreSQL and SQLite
    run the same statement."""
    slas = ToolPolicy.objects.filter(escalation_seconds__isnull=False).values_list(
        "tenant_id", "tool", "escalation_seconds"
    )
    past_sla = Q(pk__in=[])
    for tenant_id, tool, seconds in slas:
        past_sla |= Q(
            tenant_id=tenant_id, tool=tool, created_at__lte=Now() - timedelta(seconds=seconds or 0)
        )
    return (
        Action.objects.filter(status=Action.Status.WAITING_APPROVAL, escalation__isnull=True)
        .filter(past_sla)
        .select_related("run")
    )


@dataclass(frozen=True)
class LinkTarget:
    """What a decision link's page shows and decides on."""

    action: Action
    approver: object
    used: bool
    # The plan the link decides (the link names it), as the inbox shows it.
    plan: PlanSummary | None = None


def decision_link_target(
    *, action_pk: str, approver_pk: int, nonce: str, plan_pk: str | None = None
) -> LinkTarget | None:
    """The link's action (with what the page shows), its plan if it names one, its approver,
    and whether it was used; None when one of them no longer exists."""
    try:
        pk = uuid.UUID(action_pk)
        plan = plan_summary(uuid.UUID(plan_pk)) if plan_pk is not None else None
    except ValueError:
        return None
    if plan_pk is not None and plan is None:
        return None
    action = (
        Action.objects.select_related("run", "tenant", "observation", "superseded_by")
        .prefetch_related("approvals")
        .filter(pk=pk)
        .first()
    )
    approver = get_user_model().objects.filter(pk=approver_pk, is_active=True).first()
    if action is None or approver is None:
        return None
    used = DecisionLinkUse.objects.filter(nonce=nonce).exists()
    return LinkTarget(action=action, approver=approver, used=used, plan=plan)
