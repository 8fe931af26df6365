"""The inbox: what it shows, and each decision three ways (plain POST, htmx, another tenant)
plus a person without the role."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from runs.models import Action, Approval
from runs.services import action_edit_and_approve, tool_policy_set
from tests.factories import approve, make_action, make_observation, make_run, make_user
from tests.pages.conftest import (
    HTMX,
    binding,
    client_for,
    flashed,
    make_expired,
    make_waiting,
)

pytestmark = pytest.mark.django_db


def approve_url(action: Action) -> str:
    return reverse("inbox_approve", args=[action.pk])


def reject_url(action: Action) -> str:
    return reverse("inbox_reject", args=[action.pk])


# --- What the operator sees ---------------------------------------------------------------


def test_the_inbox_shows_everything_needed_to_judge_one_exact_write(operator_client, tenant):
    run = make_run(tenant, budget_limit=10, plan={"summary": "look up ticket-7, then close it"})
    observation = make_observation(run, summary="customer wrote: works now, thanks")
    action = make_action(run, observation=observation, args={"resolution": "fixed <b>now</b>"})

    page = operator_client.get(reverse("inbox")).content.decode()

    assert "ticket.close" in page
    assert "ticket-7" in page
    assert "&quot;resolution&quot;: &quot;fixed &lt;b&gt;now&lt;/b&gt;&quot;" in page
    assert "<b>now</b>" not in page
    assert "customer wrote: works now, thanks" in page
    assert observation.content_hash in page
    assert "ticket.lookup" in page
    assert run.goal in page
    assert "look up ticket-7, then close it" in page
    assert "0 of 10 used" in page
    assert "10 left" in page
    assert "agent-token" in page
    assert f"<code>v{action.base_version}</code>" in page
    assert action.intent_digest[7:19] in page
    assert "data-countdown" in page
    assert "expires in" in page
    assert f'name="seen_digest" value="{action.intent_digest}"' in page
    assert f'name="seen_state_version" value="{action.base_version}"' in page


def test_the_inbox_lists_the_soonest_to_expire_first(operator_client, tenant):
    tool_policy_set(
        tenant=tenant,
        tool="notify.send",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=600,
        actor="tests",
    )
    later = make_waiting(tenant, target="ticket-8")
    sooner = make_waiting(
        tenant, tool="notify.send", target="ops@example.com", args={"body": "done"}
    )

    page = operator_client.get(reverse("inbox")).content.decode()

    assert page.index(f"action-{sooner.pk}") < page.index(f"action-{later.pk}")


def test_an_empty_inbox_says_what_is_going_on(operator_client):
    page = operator_client.get(reverse("inbox")).content.decode()

    assert "Nothing waits for a decision" in page
    assert "refreshes" in page


def test_the_inbox_filters_by_tool_run_proposer_and_search(operator_client, tenant):
    tool_policy_set(
        tenant=tenant,
        tool="notify.send",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=3600,
        actor="tests",
    )
    close = make_waiting(tenant, target="ticket-8", proposed_by="agent-a")
    notify = make_waiting(
        tenant,
        tool="notify.send",
        target="ops@example.com",
        args={"body": "rollback at noon"},
        proposed_by="agent-b",
    )

    def shown(query: dict) -> set:
        page = operator_client.get(reverse("inbox"), query).content.decode()
        return {action.pk for action in (close, notify) if f"action-{action.pk}" in page}

    assert shown({"tool": "notify.send"}) == {notify.pk}
    assert shown({"run": str(close.run_id)}) == {close.pk}
    assert shown({"proposer": "agent-a"}) == {close.pk}
    assert shown({"q": "rollback"}) == {notify.pk}
    assert shown({"q": "no such words"}) == set()
    assert (
        "No pending request matches these filters"
        in operator_client.get(reverse("inbox"), {"q": "no such words"}).content.decode()
    )


def test_an_htmx_refresh_renders_only_the_list(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.get(reverse("inbox"), **HTMX)

    page = response.content.decode()
    assert page.lstrip().startswith('<div id="inbox-list"')
    assert f"action-{action.pk}" in page
    assert "<html" not in page


def test_an_overdue_request_shows_as_expired_without_an_approve_button(operator_client, tenant):
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=1,
        actor="tests",
    )
    action = make_waiting(tenant)
    time.sleep(1.05)

    page = operator_client.get(reverse("inbox")).content.decode()

    assert "Expired · never approved" in page
    assert approve_url(action) not in page
    assert reverse("inbox_ask_again", args=[action.pk]) in page


def test_other_tenants_requests_never_show(operator_client, other_tenant):
    theirs = make_waiting(other_tenant)

    page = operator_client.get(reverse("inbox")).content.decode()

    assert f"action-{theirs.pk}" not in page


def test_an_anonymous_visitor_is_sent_to_log_in(client):
    response = client.get(reverse("inbox"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_a_reconciler_may_not_open_the_inbox(client, tenant):
    client_for(client, make_user(tenant, "reconciler"))

    response = client.get(reverse("inbox"))

    assert response.status_code == 403
    assert "needs the" in response.content.decode()


def test_an_auditor_reads_the_inbox_without_decision_buttons(client, tenant):
    action = make_waiting(tenant)
    client_for(client, make_user(tenant, "auditor"))

    page = client.get(reverse("inbox")).content.decode()

    assert f"action-{action.pk}" in page
    assert approve_url(action) not in page
    assert 'id="bulk-form"' not in page


# --- Approve ------------------------------------------------------------------------------


def test_a_plain_approve_redirects_and_approves_exactly_what_was_seen(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.post(approve_url(action), binding(action))

    assert response.status_code == 302
    assert response["Location"] == reverse("inbox")
    action.refresh_from_db()
    assert action.status == "approved"
    grant = action.approvals.get()
    assert (grant.intent_digest, grant.state_version) == (action.intent_digest, action.base_version)
    assert any("Approved" in message for message in flashed(response))


def test_an_htmx_approve_renders_the_decided_item(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.post(approve_url(action), binding(action), **HTMX)

    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith(f'<article id="action-{action.pk}"')
    assert "Approved." in page
    assert "Queued for a worker" in page
    assert approve_url(action) not in page
    action.refresh_from_db()
    assert action.status == "approved"


def test_approving_another_tenants_request_is_not_found(client, tenant, other_tenant):
    theirs = make_waiting(other_tenant)
    client_for(client, make_user(tenant, "operator"))

    response = client.post(approve_url(theirs), binding(theirs))

    assert response.status_code == 404
    assert not Approval.objects.filter(action=theirs).exists()


def test_an_auditor_may_not_approve(client, tenant):
    action = make_waiting(tenant)
    client_for(client, make_user(tenant, "auditor"))

    response = client.post(approve_url(action), binding(action), **HTMX)

    assert response.status_code == 403
    assert not Approval.objects.filter(action=action).exists()


def test_an_approval_bound_to_another_digest_is_refused_and_says_why(operator_client, tenant):
    action = make_waiting(tenant)
    seen = {**binding(action), "seen_digest": "sha256:" + "0" * 64}

    response = operator_client.post(approve_url(action), seen, **HTMX)

    assert response.status_code == 409
    page = response.content.decode()
    assert "Refused: the intent is not the one you saw" in page
    assert "Nothing was approved" in page
    action.refresh_from_db()
    assert action.status == "waiting_approval"
    assert not action.approvals.exists()


def test_an_approval_bound_to_an_old_state_version_is_refused(operator_client, tenant):
    action = make_waiting(tenant)
    seen = {**binding(action), "seen_state_version": action.base_version - 1}

    response = operator_client.post(approve_url(action), seen)

    assert response.status_code == 302
    assert any("the run changed since you looked" in m for m in flashed(response))
    action.refresh_from_db()
    assert action.status == "waiting_approval"


def test_an_approval_without_the_binding_is_refused(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.post(approve_url(action), {}, **HTMX)

    assert response.status_code == 400
    assert "did not carry the digest and state version" in response.content.decode()
    assert not action.approvals.exists()


def test_an_expired_request_cannot_be_approved(operator_client, tenant):
    action = make_waiting(tenant, run_fields={})
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=1,
        actor="tests",
    )
    overdue = make_waiting(tenant, target="ticket-9")
    time.sleep(1.05)

    response = operator_client.post(approve_url(overdue), binding(overdue), **HTMX)

    assert response.status_code == 409
    assert "Refused: the request has expired" in response.content.decode()
    overdue.refresh_from_db()
    assert overdue.status == "waiting_approval"
    assert not overdue.approvals.exists()
    assert action.status == "waiting_approval"


def test_with_two_approvals_required_the_first_waits_for_a_second_operator(client, tenant):
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=2,
        approval_seconds=3600,
        actor="tests",
    )
    action = make_waiting(tenant)
    first = make_user(tenant, "operator")
    client_for(client, first)

    page = client.post(approve_url(action), binding(action), **HTMX).content.decode()

    assert "Waiting for another operator" in page
    assert "1 of 2" in page
    client_for(client, make_user(tenant, "operator"))
    client.post(approve_url(action), binding(action), **HTMX)
    action.refresh_from_db()
    assert action.status == "approved"


# --- Reject -------------------------------------------------------------------------------


def test_a_plain_reject_redirects_and_returns_the_reason_to_the_agent(operator_client, tenant):
    action = make_waiting(tenant)
    form = {**binding(action), "preset": "Wrong target", "reason": "close ticket-8 instead"}

    response = operator_client.post(reject_url(action), form)

    assert response.status_code == 302
    action.refresh_from_db()
    assert action.status == "rejected"
    assert action.decision_reason == "Wrong target: close ticket-8 instead"


def test_an_htmx_reject_renders_the_item_with_the_reason(operator_client, tenant):
    action = make_waiting(tenant)
    form = {**binding(action), "reason": "the customer reopened it"}

    response = operator_client.post(reject_url(action), form, **HTMX)

    assert response.status_code == 200
    page = response.content.decode()
    assert "Rejected." in page
    assert "the customer reopened it" in page
    action.refresh_from_db()
    assert (action.status, action.decision_reason) == ("rejected", "the customer reopened it")


def test_a_reject_without_a_reason_is_refused(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.post(reject_url(action), binding(action), **HTMX)

    assert response.status_code == 422
    assert "Say why" in response.content.decode()
    action.refresh_from_db()
    assert action.status == "waiting_approval"


def test_rejecting_another_tenants_request_is_not_found(client, tenant, other_tenant):
    theirs = make_waiting(other_tenant)
    client_for(client, make_user(tenant, "admin"))

    response = client.post(reject_url(theirs), {**binding(theirs), "reason": "no"}, **HTMX)

    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.status == "waiting_approval"


def test_a_reconciler_may_not_reject(client, tenant):
    action = make_waiting(tenant)
    client_for(client, make_user(tenant, "reconciler"))

    response = client.post(reject_url(action), {**binding(action), "reason": "no"})

    assert response.status_code == 403


# --- Ask again ----------------------------------------------------------------------------


def test_a_plain_ask_again_re_proposes_an_expired_request(operator_client, tenant):
    expired = make_expired(tenant)

    page = operator_client.get(reverse("inbox")).content.decode()
    assert "Expired, never approved" in page
    assert f"action-{expired.pk}" in page
    response = operator_client.post(reverse("inbox_ask_again", args=[expired.pk]))

    assert response.status_code == 302
    again = Action.objects.get(run=expired.run, action_id="close-ticket~2")
    assert again.status == "waiting_approval"
    assert (again.intent_digest, again.args) == (expired.intent_digest, expired.args)
    assert again.idempotency_key != expired.idempotency_key


def test_an_htmx_ask_again_replaces_the_expired_item_with_the_new_request(operator_client, tenant):
    expired = make_expired(tenant)

    response = operator_client.post(reverse("inbox_ask_again", args=[expired.pk]), **HTMX)

    assert response.status_code == 200
    assert response["HX-Retarget"] == f"#action-{expired.pk}"
    again = Action.objects.get(run=expired.run, action_id="close-ticket~2")
    assert f'id="action-{again.pk}"' in response.content.decode()


def test_asking_again_for_another_tenant_is_not_found(client, tenant, other_tenant):
    theirs = make_expired(other_tenant)
    client_for(client, make_user(tenant, "operator"))

    response = client.post(reverse("inbox_ask_again", args=[theirs.pk]))

    assert response.status_code == 404


def test_an_auditor_may_not_ask_again(client, tenant):
    expired = make_expired(tenant)
    client_for(client, make_user(tenant, "auditor"))

    assert client.post(reverse("inbox_ask_again", args=[expired.pk])).status_code == 403


def test_asking_again_for_a_request_still_waiting_is_refused(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.post(reverse("inbox_ask_again", args=[action.pk]), **HTMX)

    assert response.status_code == 409
    assert "Only an expired request can be asked again" in response.content.decode()


# --- Bulk ---------------------------------------------------------------------------------


def selection(action: Action) -> str:
    return f"{action.pk}/{action.base_version}/{action.intent_digest}"


def test_a_plain_bulk_approve_decides_each_and_reports_each(operator_client, tenant):
    first, second = make_waiting(tenant), make_waiting(tenant, target="ticket-8")
    form = {"decision": "approve", "selected": [selection(first), selection(second)]}

    response = operator_client.post(reverse("inbox_bulk"), form)

    assert response.status_code == 302
    assert Action.objects.filter(pk__in=[first.pk, second.pk], status="approved").count() == 2
    assert len([m for m in flashed(response) if m.endswith("Approved")]) == 2


def test_a_bulk_approve_refuses_the_stale_request_and_approves_the_rest(client, tenant):
    fresh, stale = make_waiting(tenant), make_waiting(tenant, target="ticket-8")
    shown = [selection(fresh), selection(stale)]
    colleague = make_user(tenant, "operator")
    stale.refresh_from_db()
    stale.run.refresh_from_db()
    action_edit_and_approve(
        action=stale,
        editor=colleague,
        args={"resolution": "duplicate"},
        seen_digest=stale.intent_digest,
        seen_state_version=stale.base_version,
    )
    client_for(client, make_user(tenant, "operator"))

    response = client.post(
        reverse("inbox_bulk"), {"decision": "approve", "selected": shown}, **HTMX
    )

    assert response.status_code == 200
    assert "inbox:refresh" in response["HX-Trigger"]
    page = response.content.decode()
    assert "✓ ticket.close ticket-7" in page
    assert "✗ ticket.close ticket-8" in page
    assert "superseded" in page
    fresh.refresh_from_db()
    stale.refresh_from_db()
    assert (fresh.status, stale.status) == ("approved", "superseded")
    assert not stale.approvals.exists()


def test_a_bulk_reject_needs_a_reason_and_returns_it_for_each(operator_client, tenant):
    first, second = make_waiting(tenant), make_waiting(tenant, target="ticket-8")
    shown = [selection(first), selection(second)]

    refused = operator_client.post(
        reverse("inbox_bulk"), {"decision": "reject", "selected": shown}, **HTMX
    )
    done = operator_client.post(
        reverse("inbox_bulk"),
        {"decision": "reject", "selected": shown, "preset": "Not now: ask again later"},
        **HTMX,
    )

    assert refused.status_code == 422
    assert "Say why" in refused.content.decode()
    assert done.status_code == 200
    reasons = set(
        Action.objects.filter(pk__in=[first.pk, second.pk]).values_list("decision_reason", "status")
    )
    assert reasons == {("Not now: ask again later", "rejected")}


def test_a_bulk_selection_of_another_tenants_request_decides_nothing_there(
    client, tenant, other_tenant
):
    mine, theirs = make_waiting(tenant), make_waiting(other_tenant)
    client_for(client, make_user(tenant, "operator"))

    response = client.post(
        reverse("inbox_bulk"),
        {"decision": "approve", "selected": [selection(mine), selection(theirs)]},
        **HTMX,
    )

    assert "No such request here" in response.content.decode()
    theirs.refresh_from_db()
    assert theirs.status == "waiting_approval"
    mine.refresh_from_db()
    assert mine.status == "approved"


def test_an_auditor_may_not_decide_in_bulk(client, tenant):
    action = make_waiting(tenant)
    client_for(client, make_user(tenant, "auditor"))

    response = client.post(
        reverse("inbox_bulk"), {"decision": "approve", "selected": [selection(action)]}
    )

    assert response.status_code == 403


def test_a_bulk_selection_without_its_binding_is_refused(operator_client, tenant):
    action = make_waiting(tenant)

    response = operator_client.post(
        reverse("inbox_bulk"), {"decision": "approve", "selected": [str(action.pk)]}, **HTMX
    )

    assert response.status_code == 422
    assert "does not carry what you saw" in response.content.decode()
    action.refresh_from_db()
    assert action.status == "waiting_approval"


def test_approving_twice_is_refused_for_the_second_click(operator_client, tenant):
    action = make_waiting(tenant)
    approve(action, make_user(tenant, "operator"))

    response = operator_client.post(approve_url(action), binding(action), **HTMX)

    assert response.status_code == 409
    assert "not waiting for approval" in response.content.decode()
