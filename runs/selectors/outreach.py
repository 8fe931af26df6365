"""Reads for escalations and decision links."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db.models import DurationField, ExpressionWrapper, F, OuterRef, QuerySet, Subquery
from django.db.models.functions import Now

from runs.models import Action, DecisionLinkUse, ToolPolicy
from runs.selectors.plans import PlanSummary, plan_summary


def escalations_due() -> QuerySet[Action]:
    """Requests still waiting past their tool policy's SLA that were never escalated."""
    sla = ToolPolicy.objects.filter(
        tenant=OuterRef("tenant"), tool=OuterRef("tool"), escalation_seconds__isnull=False
    ).values("escalation_seconds")[:1]
    waited = ExpressionWrapper(
        F("sla_seconds") * timedelta(seconds=1), output_field=DurationField()
    )
    return (
        Action.objects.filter(status=Action.Status.WAITING_APPROVAL, escalation__isnull=True)
        .annotate(sla_seconds=Subquery(sla))
        .filter(sla_seconds__isnull=False, created_at__lte=Now() - waited)
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
