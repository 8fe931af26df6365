"""The run list and the run page: filters, the timeline, checkpoints with their verification,
writes with attempts and receipts, the lease, and cancelling with its report."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.models import Checkpoint, Run
from runs.services import run_cancel
from tests.factories import approve, make_observation, make_run, make_tenant, make_user
from tests.pages.conftest import HTMX, client_for, flashed, make_waiting, phase_of


def detail_url(run: Run) -> str:
    return reverse("run_detail", args=[run.pk])


def cancel_url(run: Run) -> str:
    return reverse("run_cancel", args=[run.pk])


@pytest.mark.django_db
def test_the_run_list_filters_by_phase_and_tool(operator_client, tenant):
    idle = make_run(tenant, goal="summarise the week")
    waiting = make_waiting(tenant).run
    cancelled = make_run(tenant, goal="an abandoned idea")
    run_cancel(run=cancelled, reason="not needed", actor="tests")

    def shown(query: dict) -> set:
        page = operator_client.get(reverse("run_list"), query).content.decode()
        return {run.pk for run in (idle, waiting, cancelled) if detail_url(run) in page}

    assert shown({}) == {idle.pk, waiting.pk, cancelled.pk}
    assert shown({"phase": "waiting_approval"}) == {waiting.pk}
    assert shown({"phase": "cancelled"}) == {cancelled.pk}
    assert shown({"tool": "ticket.close"}) == {waiting.pk}
    assert shown({"q": "abandoned"}) == {cancelled.pk}


@pytest.mark.django_db
def test_the_run_list_shows_only_this_tenants_runs(operator_client, other_tenant):
    theirs = make_run(other_tenant)

    page = operator_client.get(reverse("run_list")).content.decode()

    assert detail_url(theirs) not in page
    assert "No runs yet" in page


@pytest.mark.django_db
def test_an_htmx_run_list_request_renders_the_table_alone(operator_client, tenant):
    run = make_run(tenant)

    page = operator_client.get(reverse("run_list"), **HTMX).content.decode()

    assert page.lstrip().startswith('<div id="run-table">')
    assert detail_url(run) in page


@pytest.mark.django_db
def test_every_role_of_the_tenant_may_read_runs(client, tenant):
    run = make_run(tenant)
    for role in ("operator", "reconciler", "auditor", "admin"):
        client_for(client, make_user(tenant, role))
        assert client.get(reverse("run_list")).status_code == 200
        assert client.get(detail_url(run)).status_code == 200


@pytest.mark.django_db
def test_the_run_page_shows_timeline_budget_deadline_checkpoints_and_pending_write(
    operator_client, tenant
):
    deadline = timezone.now() + timedelta(days=2)
    action = make_waiting(
        tenant, run_fields={"budget_limit": 5, "deadline": deadline, "plan": {"steps": ["a"]}}
    )
    run = action.run

    page = operator_client.get(detail_url(run)).content.decode()

    for event_type in ("run.started", "observation.recorded", "action.proposed"):
        assert event_type in page
    assert "0 of 5 used" in page
    assert "5 left" in page
    assert deadline.strftime("%Y-%m-%d %H:%M") in page
    assert page.count('class="badge ok">verified') == 3
    assert action.idempotency_key in page
    assert "Waiting Approval" in page
    assert "Lease" in page


@pytest.mark.django_db
def test_a_tampered_checkpoint_shows_as_failed(operator_client, tenant):
    run = make_run(tenant)
    checkpoint = Checkpoint.objects.get(run=run)
    Checkpoint.objects.filter(pk=checkpoint.pk).update(
        body=checkpoint.body.replace(run.goal, "something else entirely")
    )

    page = operator_client.get(detail_url(run)).content.decode()

    assert 'class="badge bad">failed' in page
    assert "mac:" in page


@pytest.mark.django_db
def test_the_run_page_of_another_tenant_is_not_found(client, tenant, other_tenant):
    theirs = make_run(other_tenant)
    client_for(client, make_user(tenant, "admin"))

    assert client.get(detail_url(theirs)).status_code == 404
    assert client.get(cancel_url(theirs)).status_code == 404


@pytest.mark.django_db
def test_the_run_page_pages_back_through_a_long_timeline(operator_client, tenant):
    run = make_run(tenant)
    for number in range(120):
        make_observation(run, summary=f"observation {number}")

    latest = operator_client.get(detail_url(run)).content.decode()
    earlier = operator_client.get(detail_url(run), {"before": 22}).content.decode()

    assert "#121" in latest
    assert ">#1<" not in latest
    assert "?before=22" in latest
    assert ">#1<" in earlier


# --- Cancel -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cancel_asks_for_confirmation_with_the_report_first(operator_client, tenant):
    action = make_waiting(tenant)

    page = operator_client.get(cancel_url(action.run)).content.decode()

    assert "Cancel this run?" in page
    assert "Not started (will be cancelled)" in page
    assert action.action_id in page
    assert phase_of(action.run) == "waiting_approval"


@pytest.mark.django_db
def test_a_plain_cancel_redirects_to_the_run_page_which_shows_the_report(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.post(cancel_url(action.run), {"reason": "wrong customer"})

    assert response.status_code == 302
    assert response["Location"] == detail_url(action.run)
    assert any("Run cancelled" in message for message in flashed(response))
    assert phase_of(action.run) == "cancelled"
    page = operator_client.get(detail_url(action.run)).content.decode()
    assert "Reason: wrong customer" in page
    assert "Cancelled before starting" in page


@pytest.mark.django_db
def test_an_htmx_cancel_renders_the_run_with_its_effects_report(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.post(cancel_url(action.run), {"reason": "stop"}, **HTMX)

    page = response.content.decode()
    assert response.status_code == 200
    assert page.lstrip().startswith('<div id="run-live"')
    assert "Cancelled: effects report" in page
    assert 'id="cancel-slot" hx-swap-oob="true"' in page
    action.refresh_from_db()
    assert action.status == "cancelled"


@pytest.mark.django_db
def test_cancelling_a_finished_run_is_refused(operator_client, tenant):
    run = make_run(tenant)
    run_cancel(run=run, reason="first", actor="tests")

    response = operator_client.post(cancel_url(run), {"reason": "again"}, **HTMX)

    assert response.status_code == 409
    assert "already cancelled" in response.content.decode()


@pytest.mark.django_db
def test_an_auditor_may_not_cancel_a_run(client, tenant):
    run = make_run(tenant)
    client_for(client, make_user(tenant, "auditor"))

    assert client.post(cancel_url(run), {"reason": "no"}).status_code == 403
    assert phase_of(run) == "running"


@pytest.mark.django_db
def test_cancelling_another_tenants_run_is_not_found(client, tenant, other_tenant):
    theirs = make_run(other_tenant)
    client_for(client, make_user(tenant, "operator"))

    assert client.post(cancel_url(theirs), {"reason": "no"}, **HTMX).status_code == 404
    assert phase_of(theirs) == "running"


# --- With a real worker ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_the_run_page_shows_the_attempt_receipt_and_lease_after_a_worker_ran(client, workers):
    tenant = make_tenant()
    action = make_waiting(tenant)
    approve(action, make_user(tenant, "operator"))
    assert workers.run_burst() == 0
    action.refresh_from_db()
    client_for(client, make_user(tenant, "auditor"))

    page = client.get(detail_url(action.run)).content.decode()

    assert action.receipt.receipt_id in page
    assert f"<strong>Completed:</strong> {action.action_id}</p>" in page
    assert "nothing yet" not in page
    assert "digest matches" in page
    assert 'class="badge status-succeeded">Succeeded' in page
    assert "Attempts" in page
    assert f"v{action.attempts.get().lease_version}" in page
    assert action.run.lease.owner in page


@pytest.mark.django_db
def test_the_run_page_says_nothing_is_completed_yet_only_while_the_run_goes_on(
    operator_client, tenant
):
    run = make_run(tenant)
    running = operator_client.get(detail_url(run)).content.decode()
    run_cancel(run=run, reason="not needed", actor="tests")
    ended = operator_client.get(detail_url(run)).content.decode()

    assert "<strong>Completed:</strong> nothing yet</p>" in running
    assert "<strong>Completed:</strong> no writes</p>" in ended
