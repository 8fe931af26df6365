"""`/metrics`: Countersign's state in Prometheus' text format, derived from the database.

A scrape is a handful of aggregate queries (pinned by tests/control/test_metrics.py) and one
Redis read; nothing is kept in memory, so every web process answers alike and a restart
loses nothing. Counters are counts of rows that are never deleted (approvals, attempts,
receipts, cases), so they only grow, as Prometheus counters must. The few events that
leave no row (a stale worker fenced out, a duplicate job that found nothing to do) are
counted by workers in Redis through `count_event`; those reset when Redis loses its data,
which Prometheus' rate() treats like any counter reset.

Access: `Authorization: Bearer <COUNTERSIGN_METRICS_TOKEN>`, or a client address inside
COUNTERSIGN_METRICS_NETWORKS (CIDRs, after COUNTERSIGN_TRUSTED_PROXY_COUNT). With neither
configured the endpoint does not exist (404). See docs/PERFORMANCE.md#metrics.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import django_rq
from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from redis.exceptions import RedisError

from control.auth import client_address
from control.counters import REDIS_COUNTERS, WORKER_EVENTS
from reconciliation.models import ReconciliationCase
from runs.models import Action, Approval, Attempt, OutboxMessage, Receipt

logger = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds from proposal to decision.
APPROVAL_BUCKETS = (10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


@dataclass
class Metric:
    name: str
    kind: str  # gauge | counter | histogram
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, suffix: str = "", **labels: str) -> Metric:
        self.samples.append((suffix, labels, value))
        return self


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return (
        repr(float(value))
        if isinstance(value, float) and not value.is_integer()
        else str(int(value))
    )


def render(metrics: Iterable[Metric]) -> str:
    lines = []
    for metric in metrics:
        full = f"countersign_{metric.name}"
        lines.append(f"# HELP {full} {metric.help}")
        lines.append(f"# TYPE {full} {metric.kind}")
        for suffix, labels, value in metric.samples:
            label_text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
            label_text = f"{{{label_text}}}" if label_text else ""
            lines.append(f"{full}{suffix}{label_text} {_number(value)}")
    return "\n".join(lines) + "\n"


def _seconds_since(moment) -> float:
    return max(0.0, (timezone.now() - moment).total_seconds()) if moment else 0.0


def action_metrics() -> list[Metric]:
    """Query 1: every action by tool and status, with what the gauges need."""
    rows = Action.objects.values("tool", "status").annotate(
        total=Count("pk"),
        live=Count("pk", filter=Q(status=Action.Status.WAITING_APPROVAL, expires_at__gt=Now())),
        oldest=Min("updated_at"),
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
            oldest_uncertain[tool] = _seconds_since(row["oldest"])
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
        metric.add(totals[f"le_{index}"], "_bucket", le=_number(bound))
    metric.add(totals["total"], "_bucket", le="+Inf")
    metric.add((totals["sum"] or timedelta()).total_seconds(), "_sum")
    metric.add(totals["total"], "_count")
    return metric


def case_metrics() -> list[Metric]:
    """Query 3: reconciliation cases by status and resolution."""
    rows = ReconciliationCase.objects.values("status", "resolution").annotate(
        total=Count("pk"), oldest=Min("opened_at")
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
            oldest_open = max(oldest_open, _seconds_since(row["oldest"]))
    oldest.add(oldest_open)
    return [outcomes, open_cases, oldest]


# An attempt left in `sending` whose worker never recorded its outcome, settled (or found
# uncertain) by another worker that took the run's expired lease over.
_STOLEN = Q(status=Attempt.Status.SETTLED_BY_QUERY, error_class="") | Q(
    error_class="crash_after_send"
)


def attempt_metrics() -> list[Metric]:
    """Query 4: attempts by outcome and error class; query 5: takeovers still in progress."""
    rows = Attempt.objects.values("status", "error_class").annotate(
        total=Count("pk"), stolen=Count("pk", filter=_STOLEN)
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
    lag.add(_seconds_since(backlog["oldest"]))
    undelivered = Metric("outbox_undelivered", "gauge", "Outbox messages not yet handed to RQ.")
    undelivered.add(backlog["total"])
    return [suppressed, fencing, lag, undelivered]


def worker_event_counts() -> tuple[dict[str, int], bool]:
    try:
        raw = django_rq.get_connection(settings.RQ_EXECUTION_QUEUE).hgetall(REDIS_COUNTERS)
    except RedisError as error:
        logger.warning("metrics: Redis unreachable: %s", error)
        return {}, False
    return {key.decode(): int(value) for key, value in raw.items()}, True


def collect() -> list[Metric]:
    started = time.perf_counter()
    worker_events, redis_up = worker_event_counts()
    metrics = [
        *action_metrics(),
        approval_latency_metric(),
        *case_metrics(),
        *attempt_metrics(),
        *suppression_and_outbox_metrics(worker_events),
    ]
    metrics.append(
        Metric("redis_up", "gauge", "Whether Redis answered this scrape.").add(int(redis_up))
    )
    metrics.append(
        Metric("scrape_duration_seconds", "gauge", "Time this scrape took.").add(
            round(time.perf_counter() - started, 6)
        )
    )
    return metrics


def _allowed(request: HttpRequest) -> bool | None:
    """True or False; None when /metrics is not configured at all."""
    token = getattr(settings, "COUNTERSIGN_METRICS_TOKEN", "")
    networks = getattr(settings, "COUNTERSIGN_METRICS_NETWORKS", [])
    if not token and not networks:
        return None
    if token:
        given = request.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return True
    try:
        address = ipaddress.ip_address(client_address(request))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(network, strict=False) for network in networks)


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    allowed = _allowed(request)
    if allowed is None:
        return HttpResponseNotFound("metrics are not enabled", content_type="text/plain")
    if not allowed:
        return HttpResponseForbidden("a metrics token or an allowed network is required")
    return HttpResponse(render(collect()), content_type=CONTENT_TYPE)
