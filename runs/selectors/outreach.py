"""Reads for escalations and decision links."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db.models import DurationField, ExpressionWrapper, F, OuterRef, QuerySet, Subquery
from django.db.models.functions import Now

from runs.models import Action, DecisionLinkUse, ToolPolicy


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


def decision_link_target(*, action_pk: str, approver_pk: int, nonce: str) -> LinkTarget | None:
    """The link's action (with what the page shows), its approver, and whether it was used;
    None when the action or the person no longer exists."""
    try:
        pk = uuid.UUID(action_pk)
    except ValueError:
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
    return LinkTarget(action=action, approver=approver, used=used)
