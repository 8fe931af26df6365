"""The rollup /metrics reads (control.foundation.rollup) equals a fresh COUNT of the rows, whatever
wrote them: services, the worker, bulk and raw updates; it folds without losing a count,
forgets what a rolled-back transaction did, and rebuilds after a TRUNCATE."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import Count, F

from control.foundation.prometheus import format_number, render
from control.foundation.rollup import Totals, fold, totals
from control.metrics import collect
from control.models import MetricCount
from reconciliation.management.commands.sweep import Command as SweepCommand
from reconciliation.models import ReconciliationCase
from reconciliation.probes import case_probe
from reconciliation.services import PROBE_DELAYS, case_resolve
from runs.jobs import execute_run
from runs.metrics import APPROVAL_BUCKETS
from runs.models import Action, Approval, Attempt, Receipt
from runs.services import approval_expire
from tests.api.support import execute_with_receipt, make_uncertain_with_case
from tests.factories import approve, make_action, make_run, make_tenant, make_user, reject

pytestmark = pytest.mark.django_db


def _grouped(queryset, first: str, second: str | None = None) -> dict:
    fields = [first, second] if second else [first]
    return {
        (row[first], row[second] if second else ""): row["total"]
        for row in queryset.values(*fields).order_by(*fields).annotate(total=Count("pk"))
    }


def _latency_label(latency: timedelta) -> str:
    for bound in APPROVAL_BUCKETS:
        if latency <= timedelta(seconds=bound):
            return format_number(bound)
    return "+Inf"


def fresh_counts() -> dict[str, dict[tuple[str, str], int]]:
    """What the rollup must hold, counted from the rows now."""
    latencies = [
        approval.created_at - approval.action.created_at
        for approval in Approval.objects.select_related("action")
    ]
    summed = sum(latency // timedelta(microseconds=1) for latency in latencies)
    return {
        "actions": _grouped(Action.objects, "tool", "status"),
        "attempts": _grouped(Attempt.objects, "status", "error_class"),
        "receipts": _grouped(Receipt.objects, "source"),
        "reconciliation_cases": _grouped(ReconciliationCase.objects, "status", "resolution"),
        "approval_latency_bucket": {
            (label, ""): total for label, total in Counter(map(_latency_label, latencies)).items()
        },
        "approval_latency_sum": {("", ""): summed} if summed else {},
    }


def rollup_counts(found: Totals | None = None) -> dict[str, dict[tuple[str, str], int]]:
    found = found or totals()
    return {
        metric: {(label_a, label_b): value for label_a, label_b, value in found.rows(metric)}
        for metric in fresh_counts()
    }


@pytest.fixture
def history(noop_tool, blind_tool):
    """A little of everything the rollup counts, each reached the way production does."""
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    for number in range(3):  # sent by the worker's own drain
        action = make_action(
            make_run(tenant), tool="bench.noop", target=f"item-{number}", args={"n": number}
        )
        approve(action, operator)
    assert execute_run() == 3
    sent = make_action(make_run(tenant), target="ticket-1")
    approve(sent, operator)
    execute_with_receipt(sent)
    reject(make_action(make_run(tenant), target="ticket-2"), operator, reason="wrong ticket")
    lapsed = make_action(make_run(tenant), target="ticket-3")
    Action.objects.filter(pk=lapsed.pk).update(expires_at=lapsed.created_at)
    lapsed.refresh_from_db()
    assert approval_expire(action=lapsed)
    doubtful = make_action(make_run(tenant), tool="blind.noop", target="item-9", args={"n": 9})
    approve(doubtful, operator)
    case = make_uncertain_with_case(doubtful)
    # Every probe made due at once: none can prove anything, so the case waits for a person.
    for _ in PROBE_DELAYS:
        ReconciliationCase.objects.filter(pk=case.pk).update(next_probe_at=case.opened_at)
        case_probe(case_pk=case.pk)
    case.refresh_from_db()
    assert case.status == ReconciliationCase.Status.OPEN
    reconciler = make_user(tenant, "reconciler")
    case_resolve(case=case, user=reconciler, resolution="abandon", note="no way to tell")
    still_doubtful = make_action(make_run(tenant), target="ticket-5")
    approve(still_doubtful, operator)
    make_uncertain_with_case(still_doubtful)
    for number in range(6, 9):
        make_action(make_run(tenant), target=f"ticket-{number}")
    return tenant


def test_the_rollup_equals_a_fresh_count_after_services_the_worker_and_bulk_updates(history):
    assert rollup_counts() == fresh_counts()
    assert rollup_counts()["attempts"][("succeeded", "")] == 4

    # Writes no service makes: ORM bulk updates and raw SQL, as a script or the bench would.
    waiting = Action.objects.filter(tenant=history, status=Action.Status.WAITING_APPROVAL)
    assert waiting.update(status=Action.Status.CANCELLED) == 3
    late = Approval.objects.filter(decision=Approval.Decision.APPROVE)[:2]
    Approval.objects.filter(pk__in=late).update(created_at=F("created_at") + timedelta(hours=2))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_attempt SET status = 'failed', error_class = 'http_5xx' "
            "WHERE status = 'succeeded' AND id IN (SELECT id FROM runs_attempt LIMIT 2)"
        )

    counts = rollup_counts()
    assert counts == fresh_counts()
    assert counts["actions"][("ticket.close", "cancelled")] == 3
    assert ("ticket.close", "waiting_approval") not in counts["actions"]
    assert counts["approval_latency_bucket"][("14400", "")] == 2


def test_the_scrape_reports_the_rollups_counts_as_the_aggregates_did(history):
    text = render(collect())
    fresh = fresh_counts()

    for (tool, status), total in fresh["actions"].items():
        assert f'countersign_actions{{status="{status}",tool="{tool}"}} {total}\n' in text
    for (status, error_class), total in fresh["attempts"].items():
        labels = f'error_class="{error_class or "none"}",status="{status}"'
        assert f"countersign_attempts_total{{{labels}}} {total}\n" in text
    decided = sum(fresh["approval_latency_bucket"].values())
    assert f"countersign_approval_latency_seconds_count {decided}\n" in text
    assert 'countersign_reconciliation_outcomes_total{resolution="abandon"} 1\n' in text
    assert 'countersign_reconciliation_cases{status="probing"} 1\n' in text
    assert 'countersign_uncertain_actions{tool="ticket.close"} 1\n' in text
    assert 'countersign_pending_approvals{tool="ticket.close"} 3\n' in text


def test_a_fold_leaves_one_row_per_count_and_every_total_as_it_was(history):
    before = rollup_counts()
    assert MetricCount.objects.count() > sum(len(rows) for rows in before.values())

    fold()

    assert rollup_counts() == before == fresh_counts()
    assert MetricCount.objects.count() == sum(len(rows) for rows in before.values())


def test_a_rolled_back_transaction_leaves_no_count_behind(history):
    before = rollup_counts()

    with transaction.atomic():
        Action.objects.filter(tenant=history).update(status=Action.Status.FAILED)
        assert rollup_counts() != before
        transaction.set_rollback(True)

    assert rollup_counts() == before == fresh_counts()


def test_the_rebuild_function_recounts_every_table_after_a_truncate(history):
    expected = fresh_counts()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE control_metriccount")
        assert rollup_counts() != expected
        cursor.execute("SELECT countersign_rollup_rebuild()")
        (recounted,) = cursor.fetchone()

    assert recounted == 5  # actions, approvals, attempts, receipts, cases
    assert rollup_counts() == expected
    assert MetricCount.objects.count() == sum(len(rows) for rows in expected.values())


def test_a_sweep_pass_folds_the_appended_changes(history):
    before = rollup_counts()

    # One pass, as `sweep --loop` makes each second (the command itself closes connections).
    SweepCommand()._pass(loop=False, verbosity=0)

    assert MetricCount.objects.count() == sum(len(rows) for rows in rollup_counts().values())
    assert rollup_counts() == before == fresh_counts()
