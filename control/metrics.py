"""`/metrics`: Countersign's state in Prometheus' text format, derived from the database.

The composition root of the scrape: each app's own queries (runs/metrics.py,
reconciliation/metrics.py) and the worker counters, in one fixed order, rendered by the
foundation's control/prometheus.py, which also decides who may scrape.

A scrape is a handful of aggregate queries (pinned by tests/control/test_metrics.py) and one
Redis read; nothing is kept in memory, so every web process answers alike and a restart
loses nothing. Counters are counts of rows that are never deleted (approvals, attempts,
receipts, cases), so they only grow, as Prometheus counters must. The few events that
leave no row (a stale worker fenced out, a duplicate job that found nothing to do) are
counted by workers in Redis through `count_event`; those reset when Redis loses its data,
which Prometheus' rate() treats like any counter reset. See docs/PERFORMANCE.md#metrics.
"""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from control.counters import worker_event_counts
from control.prometheus import CONTENT_TYPE, Metric, render, scrape_allowed
from control.rollup import totals as rollup_totals
from reconciliation.metrics import case_metrics
from runs.metrics import (
    action_metrics,
    approval_latency_metric,
    attempt_metrics,
    suppression_and_outbox_metrics,
)


def collect() -> list[Metric]:
    started = time.perf_counter()
    worker_events, redis_up = worker_event_counts()
    totals = rollup_totals()
    metrics = [
        *action_metrics(totals),
        approval_latency_metric(totals),
        *case_metrics(totals),
        *attempt_metrics(totals),
        *suppression_and_outbox_metrics(totals, worker_events),
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


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    allowed = scrape_allowed(request)
    if allowed is None:
        return HttpResponseNotFound("metrics are not enabled", content_type="text/plain")
    if not allowed:
        return HttpResponseForbidden("a metrics token or an allowed network is required")
    return HttpResponse(render(collect()), content_type=CONTENT_TYPE)
