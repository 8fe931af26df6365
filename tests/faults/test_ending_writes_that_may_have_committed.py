"""Cancel and "give up" never report a write as not started or failed while it may have
committed (issue 27). The ticket desk dedupes closes by key, so after a 503 the worker sends the
close again under the same key without asking: a close that committed and then answered 503
sits waiting to go again. Before a person's cancel or give-up ends it, the tool is asked by the
key (outside any transaction, as recovery asks): held -> succeeded with its receipt; absent ->
cancelled or failed as asked; no answer -> in doubt, a reconciliation case."""

from __future__ import annotations

import pytest
import requests
from django.core.management import call_command
from django.urls import reverse

from control.models import AuditEntry
from runs.execution.worker import send
from runs.models import Action
from runs.record.verification import run_verify
from runs.services import endings, lease_claim, lease_release, protocol
from runs.tools.registry import get_tool
from runs.tools.retry import DEFAULT_POLICY, RetryPolicy
from sandbox.models import Effect
from tests.api.conftest import ApiClient, make_token
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.pages.conftest import client_for, flashed

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

WORKER = "worker-under-test"
# One try and no more: a 503 leaves the write for an operator (needs_attention).
ONE_TRY = RetryPolicy(max_attempts={"transient": 1})


def _fault(sandbox: str, fault: str) -> None:
    requests.post(
        sandbox + "faults", json={"tool": "ticket.close", "fault": fault, "count": 1}, timeout=5
    ).raise_for_status()


def sent_once(sandbox: str, target: str, *, fault: str, policy: RetryPolicy) -> Action:
    """An approved close, sent once by the worker's own send step to the live desk under
    `fault`. With commit_then_fail the desk commits the close, then answers 503: the desk
    dedupes by key, so the worker records a transient failure (no query) and leaves the
    write waiting to go again: retry_wait by default, needs_attention with ONE_TRY."""
    tenant = make_tenant()
    action = make_action(make_run(tenant), target=target)
    approve(action, make_user(tenant, "operator"))
    _fault(sandbox, fault)
    lease = lease_claim(run_id=action.run_id, owner=WORKER)
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=WORKER)
    tool = get_tool(action.tool, action.contract_version)
    assert send(action, attempt, tool, lease=lease, worker=WORKER, policy=policy) is None
    lease_release(lease=lease)
    action.refresh_from_db()
    [tried] = action.attempts.all()
    assert (tried.status, tried.error_class) == ("failed", "transient")  # not "unknown"
    committed = Effect.objects.filter(idempotency_key=action.idempotency_key).count()
    assert committed == (1 if fault == "commit_then_fail" else 0)
    return action


def committed_then_503(sandbox: str, target: str, policy: RetryPolicy = ONE_TRY) -> Action:
    action = sent_once(sandbox, target, fault="commit_then_fail", policy=policy)
    assert action.status == ("needs_attention" if policy is ONE_TRY else "retry_wait")
    return action


def test_giving_up_on_a_close_that_committed_records_its_receipt_not_a_failure(sandbox):
    action = committed_then_503(sandbox, "ticket-11")
    operator = make_user(action.tenant, "operator")

    became = endings.action_give_up(action_pk=action.pk, user=operator, reason="desk is down")

    action.refresh_from_db()
    action.run.refresh_from_db()
    assert became == action.status == "succeeded"
    assert action.receipt.source == "query"
    assert action.receipt.idempotency_key == action.idempotency_key
    assert action.run.phase == "running"  # not failed: the write is done
    assert not action.run.events.filter(type="run.failed").exists()
    assert AuditEntry.objects.filter(verb="action.give_up", object_id=str(action.pk)).exists()
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
    assert run_verify(action.run) == []  # events, replay and the signed checkpoint agree


def test_the_give_up_page_says_the_write_was_found_done(client, sandbox):
    action = committed_then_503(sandbox, "ticket-12")
    client_for(client, make_user(action.tenant, "operator"))

    response = client.post(
        reverse("action_give_up", args=[action.run_id, action.pk]), {"reason": "desk is down"}
    )

    assert response.status_code == 302
    [said] = flashed(response)
    assert "was not given up" in said
    assert "holds it as done" in said
    action.refresh_from_db()
    assert action.status == "succeeded"


def test_cancelling_through_the_api_reports_a_committed_close_done_with_its_receipt(sandbox):
    action = committed_then_503(sandbox, "ticket-13", DEFAULT_POLICY)
    api = ApiClient(make_token(action.tenant), action.tenant)

    answer = api.post(f"/runs/{action.run_id}/cancel", {"reason": "the customer withdrew"})

    assert answer.status == 200, answer.body
    report = answer.body["report"]
    assert report["not_started"] == []
    [done] = report["done"]
    action.refresh_from_db()
    assert (done["action_id"], done["status"]) == (action.action_id, "succeeded")
    assert done["receipt_id"] == action.receipt.receipt_id
    assert answer.body["run"]["phase"] == "cancelled"


def test_cancelling_on_the_run_page_reports_a_committed_close_done(client, sandbox):
    action = committed_then_503(sandbox, "ticket-14")
    client_for(client, make_user(action.tenant, "operator"))

    response = client.post(
        reverse("run_cancel", args=[action.run_id]), {"reason": "the customer withdrew"}
    )

    assert response.status_code == 302
    action.refresh_from_db()
    assert action.status == "succeeded"
    stop = action.run.events.get(type="run.cancelled")
    assert [entry["action_id"] for entry in stop.payload["report"]["done"]] == [action.action_id]
    assert stop.payload["report"]["not_started"] == []


def test_a_close_that_never_committed_is_still_cancelled_and_given_up(sandbox):
    """Asked by the key, the desk holds nothing: the write ends as the person asked."""
    waiting = sent_once(sandbox, "ticket-15", fault="fail_before_commit", policy=DEFAULT_POLICY)
    attention = sent_once(sandbox, "ticket-18", fault="fail_before_commit", policy=ONE_TRY)
    api = ApiClient(make_token(waiting.tenant), waiting.tenant)

    answer = api.post(f"/runs/{waiting.run_id}/cancel", {"reason": "not needed"})
    became = endings.action_give_up(
        action_pk=attention.pk, user=make_user(attention.tenant, "operator"), reason="not needed"
    )

    assert [entry["action_id"] for entry in answer.body["report"]["not_started"]] == [
        waiting.action_id
    ]
    waiting.refresh_from_db()
    attention.refresh_from_db()
    assert (waiting.status, became, attention.status) == ("cancelled", "failed", "failed")
    assert not Effect.objects.filter(target__in=["ticket-15", "ticket-18"]).exists()


def test_when_the_desk_cannot_be_asked_the_write_is_in_doubt_never_not_started(sandbox, settings):
    action = committed_then_503(sandbox, "ticket-16", DEFAULT_POLICY)
    settings.SANDBOX_URL = "http://127.0.0.1:9/sandbox/"  # nothing answers there
    api = ApiClient(make_token(action.tenant), action.tenant)

    answer = api.post(f"/runs/{action.run_id}/cancel", {"reason": "the customer withdrew"})

    report = answer.body["report"]
    assert report["not_started"] == []
    assert [entry["action_id"] for entry in report["in_doubt"]] == [action.action_id]
    action.refresh_from_db()
    assert action.status == "uncertain"
    assert "query by key proved nothing" in action.last_error
    call_command("sweep", verbosity=0)  # the outbox opens the case
    assert action.cases.exists()
    assert run_verify(action.run) == []


def test_giving_up_when_the_desk_cannot_be_asked_leaves_the_write_in_doubt(sandbox, settings):
    action = committed_then_503(sandbox, "ticket-17")
    settings.SANDBOX_URL = "http://127.0.0.1:9/sandbox/"
    operator = make_user(action.tenant, "operator")

    became = endings.action_give_up(action_pk=action.pk, user=operator, reason="desk is down")

    action.refresh_from_db()
    action.run.refresh_from_db()
    assert became == action.status == "uncertain"
    assert action.run.phase == "waiting_reconciliation"


def test_an_htmx_cancel_shows_the_committed_close_done_and_another_tenant_asks_nothing(
    client, sandbox
):
    action = committed_then_503(sandbox, "ticket-19")
    cancel = reverse("run_cancel", args=[action.run_id])
    form = {"reason": "the customer withdrew"}

    stranger = client_for(client, make_user(make_tenant(), "operator")).post(cancel, form)
    action.refresh_from_db()
    assert (stranger.status_code, action.status) == (404, "needs_attention")

    response = client_for(client, make_user(action.tenant, "operator")).post(
        cancel, form, HTTP_HX_REQUEST="true"
    )

    page = response.content.decode()
    assert response.status_code == 200
    assert "Cancelled: effects report" in page
    action.refresh_from_db()
    assert action.status == "succeeded"
    assert f"receipt <code>{action.receipt.receipt_id}</code>" in page
