"""A write that outlasted its retry window waits on the run page for an operator: "retry now
(same key)" or "give up" with a reason. Plain POST, htmx, another tenant, another role."""

from __future__ import annotations

import pytest
from django.urls import reverse

from control.models import AuditEntry
from runs.models import Action
from runs.services import lease_claim, lease_release, protocol
from tests.factories import approve, make_action, make_run, make_user
from tests.pages.conftest import HTMX, client_for, flashed

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("noop_tool", "unsent_tool")]


def needing_attention(tenant, operator, *, tool: str = "unsent.noop") -> Action:
    """Transient failures until the retry window closed, as the worker leaves it. By default
    on a tool that, asked by the key, holds nothing: giving up then fails the write."""
    action = make_action(make_run(tenant), tool=tool, target="item-1", args={})
    approve(action, operator)
    lease = lease_claim(run_id=action.run_id, owner="worker")
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="worker")
    protocol.attempt_failed(
        attempt_pk=attempt.pk,
        lease=lease,
        error_class="transient",
        detail="HTTP 503 for the fifth time",
        worker="worker",
        retry_in=None,
        needs_attention=True,
    )
    lease_release(lease=lease)
    action.refresh_from_db()
    return action


def url(name: str, action: Action) -> str:
    return reverse(name, args=[action.run_id, action.pk])


def test_the_run_page_offers_retry_now_and_give_up(operator_client, tenant, operator):
    action = needing_attention(tenant, operator)
    page = operator_client.get(reverse("run_detail", args=[action.run_id])).content.decode()
    assert "data-needs-attention" in page
    assert url("action_retry_now", action) in page
    assert url("action_give_up", action) in page


def test_a_plain_retry_now_queues_the_same_key_and_redirects(operator_client, tenant, operator):
    action = needing_attention(tenant, operator)
    response = operator_client.post(url("action_retry_now", action))
    assert response.status_code == 302
    assert response["Location"] == reverse("run_detail", args=[action.run_id])
    assert "goes out again now under the same key" in flashed(response)[0]
    action.refresh_from_db()
    assert (action.status, action.run.actions.count()) == ("retry_wait", 1)
    assert AuditEntry.objects.filter(verb="action.retry_now", object_id=str(action.pk)).exists()


def test_an_htmx_give_up_renders_the_run_with_the_outcome(operator_client, tenant, operator):
    action = needing_attention(tenant, operator)
    response = operator_client.post(
        url("action_give_up", action), {"reason": "the desk is retired"}, **HTMX
    )
    assert response.status_code == 200
    assert 'id="run-live"' in response.content.decode()
    assert "Gave up on" in response.content.decode()
    action.refresh_from_db()
    action.run.refresh_from_db()
    assert (action.status, action.run.phase) == ("failed", "failed")


def test_giving_up_on_a_write_its_tool_holds_records_it_done_not_failed(
    operator_client, tenant, operator
):
    """The 503 came after the no-op's commit: asked by the key, it holds the write."""
    action = needing_attention(tenant, operator, tool="bench.noop")
    response = operator_client.post(
        url("action_give_up", action), {"reason": "the desk is retired"}, **HTMX
    )
    assert response.status_code == 200
    assert "was not given up: asked by its key, the tool holds it as done" in (
        response.content.decode()
    )
    action.refresh_from_db()
    action.run.refresh_from_db()
    assert (action.status, action.receipt.source, action.run.phase) == (
        "succeeded",
        "query",
        "running",
    )
    audit = AuditEntry.objects.get(verb="action.give_up", object_id=str(action.pk))
    assert audit.data == {"refused": "asked by its key, the write is succeeded"}


def test_giving_up_without_a_reason_changes_nothing(operator_client, tenant, operator):
    action = needing_attention(tenant, operator)
    response = operator_client.post(url("action_give_up", action), {"reason": ""}, **HTMX)
    assert response.status_code == 422
    action.refresh_from_db()
    assert action.status == "needs_attention"


def test_retrying_a_write_that_needs_nothing_is_refused(operator_client, tenant, operator):
    action = make_action(make_run(tenant), tool="bench.noop", target="item-2", args={})
    response = operator_client.post(url("action_retry_now", action), **HTMX)
    assert response.status_code == 409
    action.refresh_from_db()
    assert action.status == "waiting_approval"


def test_another_tenant_and_another_role_cannot_decide(client, tenant, other_tenant, operator):
    action = needing_attention(tenant, operator)
    outsider = make_user(other_tenant, "operator")
    assert client_for(client, outsider).post(url("action_retry_now", action)).status_code == 404
    auditor = make_user(tenant, "auditor")
    assert client_for(client, auditor).post(url("action_give_up", action)).status_code == 403
    action.refresh_from_db()
    assert action.status == "needs_attention"
