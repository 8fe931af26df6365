"""The reconciliation app's numbers for `/metrics`: cases by status and resolution."""

from __future__ import annotations

from django.db.models import Count, Min

from control.prometheus import Metric, seconds_since
from reconciliation.models import ReconciliationCase


def case_metrics() -> list[Metric]:
    """Query 3: reconciliation cases by status and resolution."""
    rows = (
        ReconciliationCase.objects.values("status", "resolution")
        .order_by("status", "resolution")
        .annotate(total=Count("pk"), oldest=Min("opened_at"))
    )
    outcomes = Metric(
        "reconciliation_outcomes_total", "counter", "Resolved reconciliation cases by outcome."
    )
    open_cases = Metric("reconciliation_cases", "gauge", "Unresolved cases by status.")
    oldest = Metric(
        "reconciliation_oldest_open_age_seconds", "gauge", "Age of the oldest unresolved case."
    )
    oldest_open = 0.0
    for row in rows:
        if row["status"] == ReconciliationCase.Status.RESOLVED:
            outcomes.add(row["total"], resolution=row["resolution"])
        else:
            open_cases.add(row["total"], status=row["status"])
            oldest_open = max(oldest_open, seconds_since(row["oldest"]))
    oldest.add(oldest_open)
    return [outcomes, open_cases, oldest]
