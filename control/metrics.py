"""`/metrics`: Countersign's state in Prometheus' text format, derived from the database.

The composition root of the scrape: the rollup's counts (control.foundation.rollup), each app's own
metrics built from them and from its backlogs (runs/metrics.py, reconciliation/metrics.py),
and the worker counters, in one fixed order, rendered by the foundation's
control/foundation/prometheus.py, which also decides who may scrape.

What keeps the counts: row triggers on runs_action, runs_approval, runs_attempt,
runs_receipt and reconciliation_reconciliationcase (installed by runs/migrations/0013 and
reconciliation/migrations/0002, which also counted the rows already there) append each
row's change to control_metriccount in the transaction that changes the row; the sweep
folds those changes into one row per count. A scrape sums that small table and reads only
backlogs through partial indexes (live requests, unknown outcomes, unresolved cases, sends
in progress, the undelivered outbox): six queries whatever the history's size, pinned by
tests/control/test_metrics.py, and one Redis read.

Why the counts cannot drift: a trigger runs inside the writing statement, so a change and
its count commit or roll back together, whoever writes (a service, a bulk `update()`, the
bench's SQL, psql); nothing in Python has to remember to count. What would make them drift:
TRUNCATE of a counted table (only the test suite's flush truncates, and it empties
control_metriccount with it), writes with triggers off (`session_replication_role =
replica`: pg_restore --data-only, logical replication), or a trigger disabled or dropped.
Then `SELECT countersign_rollup_rebuild();` recounts every counted table from its rows
(PostgreSQL; SQLite: migrate runs and reconciliation back and forward again);
tests/control/test_rollup.py proves it after a TRUNCATE.

Counters are counts of rows that are never deleted (approvals, attempts, receipts, cases),
so they only grow, as Prometheus counters must. The few events that leave no row (a stale
worker fenced out, a duplicate job that found nothing to do) are counted by workers in
Redis through `count_event`; those reset when Redis loses its data, which Prometheus'
rate() treats like any counter reset. See docs/PERFORMANCE.md#metrics.
"""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from control.foundation.counters import worker_event_counts
from control.foundation.prometheus import CONTENT_TYPE, Metric, render, scrape_allowed
from control.foundation.rollup import totals as rollup_totals
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
