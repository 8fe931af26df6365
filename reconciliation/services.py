"""Opening reconciliation cases for actions whose outcome nothing could prove."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from control.audit import audit_record
from reconciliation.models import ReconciliationCase
from runs.models import Action


def case_open(*, action: Action) -> ReconciliationCase | None:
    """Opens the case for an uncertain action; None when one is already open."""
    if action.status != Action.Status.UNCERTAIN:
        return None
    last = action.attempts.order_by("-number").first()
    try:
        with transaction.atomic():
            case = ReconciliationCase.objects.create(
                tenant_id=action.tenant_id,
                run_id=action.run_id,
                action=action,
                reason=action.error_class or "tool_result_uncertain",
                detail=action.last_error,
                findings=[
                    {"attempt": last.number, "error_class": last.error_class, "error": last.error}
                ]
                if last
                else [],
            )
            audit_record(
                actor="countersign",
                verb="case.open",
                tenant=action.tenant,
                object_type="case",
                object_id=str(case.pk),
                reason=case.reason,
                data={"action": str(action.pk)},
            )
    except IntegrityError:
        return None
    return case


def open_missing_cases(*, run_id=None) -> int:
    """Every uncertain action without an open case gets one; returns how many opened."""
    actions = (
        Action.objects.filter(status=Action.Status.UNCERTAIN)
        .exclude(cases__status=ReconciliationCase.Status.OPEN)
        .select_related("tenant")
    )
    if run_id is not None:
        actions = actions.filter(run_id=run_id)
    return sum(case_open(action=action) is not None for action in actions)
