"""The runs app's numbers for `/metrics`: intents, approval latency, attempts, takeovers,
suppressed duplicates and the outbox. A fixed handful of aggregate queries at any size."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.db.models.functions import Now

from control.counters import WORKER_EVENTS
from control.prometheus import Metric, format_number, seconds_since
from runs.models import Action, Approval, Attempt, OutboxMessage, Receipt

# Seconds from proposal to decision.
APPROVAL_BUCKETS = (10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


def action_metrics() -> list[Metric]:
    """Query 1: every action by tool and status, with what the gauges need."""
    rows = (
        Action.objects.values("tool", "status")
        .order_by("tool", "status")
        .annotate(
            total=Count("pk"),
            live=Count("pk", filter=Q(status=Action.Status.WAITING_APPROVAL, expires_at__gt=Now())),
            oldest=Min("updated_at"),
        )
    )
    pending = Metric("pending_approvals", "gauge", "Intents waiting for a decision, not expired.")
    expiries = Metric(
        "approval_expiries_total", "counter", "Requests that expired before a decision."
    )
    uncertain = Metric(
        "uncertain_actions", "gauge", "Writes whose outcome is unknown (in reconciliation)."
    )
    oldest = Metric("uncertain_oldest_age_seconds", "gauge", "Age of the oldest unknown outcome.")
    by_status = Metric("actions", "gauge", "Intents by tool and status.")
    oldest_uncertain: dict[str, float] = {}
    for row in rows:
        tool, status = row["tool"], row["status"]
        by_status.add(row["total"], tool=tool, status=status)
        if status == Action.Status.WAITING_APPROVAL:
            pending.add(row["live"], tool=tool)
        elif status == Action.Status.EXPIRED:
            expiries.add(row["total"], tool=tool)
        elif status == Action.Status.UNCERTAIN:
            uncertain.add(row["total"], tool=tool)
            oldest_uncertain[tool] = seconds_since(row["oldest"])
    oldest.add(max(oldest_uncertain.values(), default=0.0))
    return [pending, expiries, uncertain, oldest, by_status]


def approval_latency_metric() -> Metric:
    """Query 2: the histogram of time from proposal to decision, over every decision."""
    latency = ExpressionWrapper(F("created_at") - F("action__created_at"), DurationField())
    buckets = {
        f"le_{index}": Count("pk", filter=Q(latency__lte=timedelta(seconds=bound)))
        for index, bound in enumerate(APPROVAL_BUCKETS)
    }
    totals = Approval.objects.annotate(latency=latency).aggregate(
        total=Count("pk"), sum=Sum("latency"), **buckets
    )
    metric = Metric(
        "approval_latency_seconds", "histogram", "Time from an intent's proposal to a decision."
    )
    for index, bound in enumerate(APPROVAL_BUCKETS):
        metric.add(totals[f"le_{index}"], "_bucket", le=format_number(bound))
    metric.add(totals["total"], "_bucket", le="+Inf")
    metric.add((totals["sum"] or timedelta()).total_seconds(), "_sum")
    metric.add(totals["total"], "_count")
    return metric


# An attempt left in `sending` whose worker never recorded its outcome, settled (or found
# uncertain) by another worker that took the run's expired lease over.
_STOLEN = Q(status=Attempt.Status.SETTLED_BY_QUERY, error_class="") | Q(
    error_class="crash_after_send"
)


def attempt_metrics() -> list[Metric]:
    """Query 4: attempts by outcome and error class; query 5: takeovers still in progress."""
    rows = (
        Attempt.objects.values("status", "error_class")
        .order_by("status", "error_class")
        .annotate(total=Count("pk"), stolen=Count("pk", filter=_STOLEN))
    )
    attempts = Metric("attempts_total", "counter", "Tool calls by outcome and error class.")
    stolen = 0
    for row in rows:
        attempts.add(row["total"], status=row["status"], error_class=row["error_class"] or "none")
        stolen += row["stolen"]
    stolen += Attempt.objects.filter(
        status=Attempt.Status.SENDING, lease_version__lt=F("action__run__lease__lease_version")
    ).count()
    steals = Metric(
        "lease_steals_total",
        "counter",
        "Runs taken over from a worker that died or stalled mid-write (lease expired).",
    ).add(stolen)
    return [attempts, steals]


def suppression_and_outbox_metrics(worker_events: dict[str, int]) -> list[Metric]:
    """Query 6: receipts by source; query 7: the outbox's undelivered backlog."""
    by_source = dict(Receipt.objects.values_list("source").annotate(total=Count("pk")))
    suppressed = Metric(
        "duplicate_suppressions_total",
        "counter",
        "Sends avoided: the effect was found by key, the target already satisfied, or a "
        "duplicate job found nothing to do.",
    )
    suppressed.add(by_source.get(Receipt.Source.QUERY, 0), how="receipt_found_by_key")
    suppressed.add(by_source.get(Receipt.Source.READ, 0), how="already_satisfied")
    suppressed.add(worker_events.get("duplicate_jobs", 0), how="duplicate_job")
    fencing = Metric(
        "fencing_rejections_total", "counter", WORKER_EVENTS["fencing_rejections"]
    ).add(worker_events.get("fencing_rejections", 0))
    backlog = OutboxMessage.objects.filter(delivered_at__isnull=True).aggregate(
        total=Count("pk"), oldest=Min("created_at")
    )
    lag = Metric("outbox_lag_seconds", "gauge", "Age of the oldest undelivered outbox message.")
    lag.add(seconds_since(backlog["oldest"]))
    undelivered = Metric("outbox_undelivered", "gauge", "Outbox messages not yet handed to RQ.")
    undelivered.add(backlog["total"])
    return [suppressed, fencing, lag, undelivered]
