"""A long history for measuring `/metrics`: a million settled intents in a throwaway tenant.

One run built as the services would leave it (bench.builder) gives a real `ticket.close`
intent; set-based SQL then copies it `actions` times into settled intents of one run (19 in
20 succeeded, the rest failed, rejected or expired), each decided intent with its Approval,
each sent one with its Attempt, each success with its Receipt, and one in 100 with a
resolved reconciliation case: the rows the scrape used to aggregate. Not for production
databases. Figures: docs/PERFORMANCE.md#metrics.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from bench.builder import RunSpec, build_and_insert
from control.metrics import collect
from control.models import Tenant
from control.services import tenant_create
from runs.models import Action

# Copies of the template intent: every column kept but these.
_ACTION_COPY = {
    "id": "gen_random_uuid()",
    "action_id": "t.action_id || '-' || n",
    "idempotency_key": "t.idempotency_key || '-' || n",
    "status": (
        "CASE n %% 20 WHEN 0 THEN 'failed' WHEN 1 THEN 'rejected' WHEN 2 THEN 'expired' "
        "ELSE 'succeeded' END"
    ),
    "expires_at": "NULL",
    "next_attempt_at": "NULL",
    "created_at": "t.created_at - n * interval '1 second'",
    "updated_at": "t.created_at - n * interval '1 second' + interval '2 minutes'",
}
_COPIES = "runs_action t, generate_series(1, %s) n WHERE t.id = %s"
_SETTLED = "FROM runs_action a WHERE a.run_id = %s AND a.id <> %s"
_APPROVALS = f"""
INSERT INTO runs_approval (id, tenant_id, action_id, decision, approver_id, reason,
    intent_digest, state_version, target_scope, expires_at, created_at, plan_digest)
SELECT gen_random_uuid(), a.tenant_id, a.id,
    CASE a.status WHEN 'rejected' THEN 'reject' ELSE 'approve' END, %s, '',
    a.intent_digest, a.base_version, a.target, a.created_at + interval '1 day',
    a.created_at + (abs(hashtext(a.action_id)) %% 7200) * interval '1 second', ''
{_SETTLED} AND a.status <> 'expired'"""
_ATTEMPTS = f"""
INSERT INTO runs_attempt (action_id, number, worker, lease_version, status, error_class,
    error, started_at, finished_at)
SELECT a.id, 1, 'seed', 1, a.status, CASE a.status WHEN 'failed' THEN 'http_4xx' ELSE '' END,
    '', a.updated_at, a.updated_at
{_SETTLED} AND a.status IN ('succeeded', 'failed')"""
_RECEIPTS = f"""
INSERT INTO runs_receipt (tenant_id, action_id, idempotency_key, intent_digest, receipt_id,
    status, raw_response_hash, source, created_at)
SELECT a.tenant_id, a.id, a.idempotency_key, a.intent_digest, 'r-' || a.action_id, 'closed',
    '', CASE abs(hashtext(a.action_id)) %% 50 WHEN 0 THEN 'query' WHEN 1 THEN 'read'
    ELSE 'response' END, a.updated_at
{_SETTLED} AND a.status = 'succeeded'"""
_CASES = f"""
INSERT INTO reconciliation_reconciliationcase (id, tenant_id, run_id, action_id, reason,
    detail, findings, status, probes, resolution, resolution_note, resend_confirmed,
    opened_at, resolved_at)
SELECT gen_random_uuid(), a.tenant_id, a.run_id, a.id, 'crash_after_send', '', '[]',
    'resolved', 1, 'applied', '', false, a.updated_at, a.updated_at + interval '1 hour'
{_SETTLED} AND a.status = 'succeeded' AND abs(hashtext(a.action_id)) %% 100 = 0"""


@dataclass
class HistoryReport:
    tenant: Tenant
    actions: int
    seconds: float


def seed_history(*, tenant_name: str, actions: int) -> HistoryReport:
    started = time.perf_counter()
    tenant = tenant_create(name=tenant_name, actor="seed_history")
    approver, _ = get_user_model().objects.get_or_create(username=f"{tenant_name}-approver")
    spec = RunSpec(
        tenant=tenant,
        tool="ticket.close",
        target="ticket-1",
        args={"resolution": "fixed"},
        action_id="close",
        goal="a long history of settled intents",
    )
    build_and_insert([spec], now=timezone.now())
    template = Action.objects.get(tenant=tenant)
    columns = [field.column for field in Action._meta.concrete_fields]
    select = ", ".join(_ACTION_COPY.get(column, f"t.{column}") for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO runs_action ({', '.join(columns)}) SELECT {select} FROM {_COPIES}",
            [actions, template.pk],
        )
        settled = [template.run_id, template.pk]
        cursor.execute(_APPROVALS, [approver.pk, *settled])
        for statement in (_ATTEMPTS, _RECEIPTS, _CASES):
            cursor.execute(statement, settled)
        for table in ("runs_action", "runs_approval", "runs_attempt", "runs_receipt"):
            cursor.execute(f"ANALYZE {table}")
        cursor.execute("ANALYZE reconciliation_reconciliationcase")
    return HistoryReport(tenant, actions, time.perf_counter() - started)


def scrape_milliseconds(times: int) -> list[float]:
    """`collect()` (every query of a scrape, without the HTTP layer) `times` times."""
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        collect()
        taken.append((time.perf_counter() - started) * 1000)
    return taken


def transition_microseconds(*, tenant: Tenant, count: int, triggers: bool = True) -> float:
    """Mean cost of one status change in its own transaction (autocommit): `count` settled
    intents moved to `failed` and back, one UPDATE each, as a worker's transition would.
    Without `triggers`, the session skips every trigger (session_replication_role, which
    needs a superuser): the changes net to zero, so the rollup does not drift."""
    ids = list(
        Action.objects.filter(tenant=tenant, status=Action.Status.SUCCEEDED).values_list(
            "pk", flat=True
        )[:count]
    )
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = %s", ["origin" if triggers else "replica"])
        started = time.perf_counter()
        try:
            for status, back in (("failed", "succeeded"), ("succeeded", "failed")):
                for pk in ids:
                    cursor.execute(
                        "UPDATE runs_action SET status = %s, updated_at = now() "
                        "WHERE id = %s AND status = %s",
                        [status, pk, back],
                    )
            return (time.perf_counter() - started) * 1e6 / (2 * len(ids))
        finally:
            cursor.execute("RESET session_replication_role")


def median(values: list[float]) -> float:
    return statistics.median(values)
