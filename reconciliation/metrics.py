"""The reconciliation app's numbers for `/metrics`: cases by status and resolution.

The counts come from the rollup (control.foundation.rollup, declared in
reconciliation/migrations/0002_metric_rollup.py); the oldest unresolved case is read from
the unresolved cases alone, through the partial index of case_one_unresolved_per_action.
"""

from __future__ import annotations

from django.db.models import Min, Q

from control.foundation.prometheus import Metric, seconds_since
from control.foundation.rollup import Totals
from reconciliation.models import ReconciliationCase


def case_metrics(totals: Totals) -> list[Metric]:
    """Cases by status and resolution; query 7: the oldest unresolved one."""
    oldest_opened = ReconciliationCase.objects.filter(
        ~Q(status=ReconciliationCase.Status.RESOLVED)
    ).aggregate(oldest=Min("opened_at"))["oldest"]
    outcomes = Metric(
        "reconciliation_outcomes_total", "counter", "Resolved reconciliation cases by outcome."
    )
    open_cases = Metric("reconciliation_cases", "gauge", "Unresolved cases by status.")
    oldest = Metric(
        "reconciliation_oldest_open_age_seconds", "gauge", "Age of the oldest unresolved case."
    )
    for status, resolution, total in totals.rows("reconciliation_cases"):
        if status == ReconciliationCase.Status.RESOLVED:
            outcomes.add(total, resolution=resolution)
        else:
            open_cases.add(total, status=status)
    oldest.add(seconds_since(oldest_opened))
    return [outcomes, open_cases, oldest]
