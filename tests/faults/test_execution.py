"""One approved write, executed by a real RQ worker process against the sandbox over HTTP."""

from __future__ import annotations

import pytest
import requests

from runs.models import Action
from runs.record.verification import run_verify
from runs.services import run_complete
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def test_an_approved_close_runs_once_in_a_worker_and_completes_with_its_receipt(workers):
    tenant = make_tenant()
    action = make_action(make_run(tenant), target="ticket-7")
    approve(action, make_user(tenant, "operator"))
    assert workers.run_burst() == 0
    action.refresh_from_db()
    assert action.status == "succeeded"
    receipt = action.receipt
    assert (receipt.intent_digest, receipt.source, receipt.status) == (
        action.intent_digest,
        "response",
        "closed",
    )
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
    run = action.run
    run.refresh_from_db()
    assert run.phase == "running"
    run_complete(run=run, action_ids=["close-ticket"], actor="agent")
    run.refresh_from_db()
    assert run.phase == "completed"
    assert run.evidence["receipts"] == {"close-ticket": receipt.receipt_id}
    assert run_verify(run) == []


def test_an_already_closed_ticket_is_satisfied_by_a_read_without_a_write(workers, sandbox):
    tenant = make_tenant()
    requests.post(
        sandbox + "tickets/ticket-9/close",
        json={"args": {"resolution": "fixed"}},
        headers={"Idempotency-Key": "someone-else"},
        timeout=5,
    ).raise_for_status()
    action = make_action(make_run(tenant), target="ticket-9")
    approve(action, make_user(tenant, "operator"))
    assert workers.run_burst() == 0
    action.refresh_from_db()
    assert (action.status, action.receipt.source) == ("satisfied", "read")
    assert action.attempts.count() == 0
    assert Effect.objects.filter(target="ticket-9").count() == 1
    run_complete(run=action.run, action_ids=["close-ticket"], actor="agent")


def test_a_second_delivery_of_the_same_job_changes_nothing(workers, redis_queue):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    assert workers.run_burst() == 0
    redis_queue.enqueue("runs.jobs.execute_run", str(action.run_id))
    assert workers.run_burst() == 0
    action.refresh_from_db()
    assert action.attempts.count() == 1
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
    assert Action.objects.get(pk=action.pk).status == "succeeded"
