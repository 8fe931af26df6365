"""The runs app's numbers for `/metrics`: intents, approval latency, attempts, takeovers,
suppressed duplicates and the outbox.

Counts come from the rollup (control.foundation.rollup; what this app's rows count for is
declared in runs/migrations/0013_metric_rollup.py); the rest reads only backlogs through partial
indexes: live approval requests, unknown outcomes, sends in progress, the undelivered
outbox. No query here grows with history.
"""

from __future__ import annotations

from django.db.models import Count, F, Min
from django.db.models.functions import Now

from control.foundation.counters import WORKER_EVENTS
from control.foundation.prometheus import Metric, format_number, seconds_since
from control.foundation.rollup import Totals
from runs.models import Action, Attempt, OutboxMessage, Receipt

# Seconds from proposal to decision.
APPROVAL_BUCKETS = (10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


def action_metrics(totals: Totals) -> list[Metric]:
    """Intents by tool and status from the rollup; live requests (query 3) and the oldest
    unknown outcome (query 4) from the rows still waiting or in doubt."""
    waiting = Action.objects.filter(status=Action.Status.WAITING_APPROVAL)
    live = dict(
        waiting.filter(expires_at__gt=Now()).values_list("tool").annotate(total=Count("pk"))
    )
    oldest_uncertain = Action.objects.filter(status=Action.Status.UNCERTAIN).aggregate(
        oldest=Min("updated_at")
    )["oldest"]
    pending = Metric("pending_approvals", "gauge", "Intents waiting for a decision, not expired.")
    expiries = Metric(
        "approval_expiries_total", "counter", "Requests that expired before a decision."
    )
    uncertain = Metric(
        "uncertain_actions", "gauge", "Writes whose outcome is unknown (in reconciliation)."
    )
    oldest = Metric("uncertain_oldest_age_seconds", "gauge", "Age of the oldest unknown outcome.")
    by_status = Metric("actions", "gauge", "Intents by tool and status.")
    for tool, status, total in totals.rows("actions"):
        by_status.add(total, tool=tool, status=status)
        if status == Action.Status.WAITING_APPROVAL:
            pending.add(live.get(tool, 0), tool=tool)
        elif status == Action.Status.EXPIRED:
            expiries.add(total, tool=tool)
        elif status == Action.Status.UNCERTAIN:
            uncertain.add(total, tool=tool)
    oldest.add(seconds_since(oldest_uncertain))
    return [pending, expiries, uncertain, oldest, by_status]


def approval_latency_metric(totals: Totals) -> Metric:
    """The histogram of time from proposal to decision, over every decision: the rollup
    keeps each decision's bucket and the sum of their latencies in microseconds."""
    in_bucket = {label: total for label, _, total in totals.rows("approval_latency_bucket")}
    summed = sum(total for _, _, total in totals.rows("approval_latency_sum"))
    metric = Metric(
        "approval_latency_seconds", "histogram", "Time from an intent's proposal to a decision."
    )
    cumulative = 0
    for bound in APPROVAL_BUCKETS:
        cumulative += in_bucket.get(format_number(bound), 0)
        metric.add(cumulative, "_bucket", le=format_number(bound))
    count = sum(in_bucket.values())
    metric.add(count, "_bucket", le="+Inf")
    metric.add(summed / 10**6, "_sum")
    metric.add(count, "_count")
    return metric


def _stolen(status: str, error_class: str) -> bool:
    """An attempt left in `sending` whose worker never recorded its outcome, settled (or
    found uncertain) by another worker that took the run's expired lease over."""
    return (
        status == Attempt.Status.SETTLED_BY_QUERY and not error_class
    ) or error_class == "crash_after_send"


def attempt_metrics(totals: Totals) -> list[Metric]:
    """Attempts by outcome and error class from the rollup; query 5: takeovers still in
    progress (sends whose lease moved on), over the attempts in `sending` only."""
    attempts = Metric("attempts_total", "counter", "Tool calls by outcome and error class.")
    stolen = 0
    for status, error_class, total in totals.rows("attempts"):
        attempts.add(total, status=status, error_class=error_class or "none")
        stolen += total if _stolen(status, error_class) else 0
    stolen += Attempt.objects.filter(
        status=Attempt.Status.SENDING, lease_version__lt=F("action__run__lease__lease_version")
    ).count()
    steals = Metric(
        "lease_steals_total",
        "counter",
        "Runs taken over from a worker that died or stalled mid-write (lease expired).",
    ).add(stolen)
    return [attempts, steals]


def suppression_and_outbox_metrics(totals: Totals, worker_events: dict[str, int]) -> list[Metric]:
    """Receipts by source from the rollup; query 6: the outbox's undelivered backlog."""
    by_source = {source: total for source, _, total in totals.rows("receipts")}
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
