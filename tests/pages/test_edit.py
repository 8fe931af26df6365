"""Edit then approve: a form over the arguments, a review of the diff, then a new intent
(new logical id, key and digest) that supersedes the old one and is approved."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.models import Action, Approval
from runs.services import tool_policy_set
from tests.factories import make_user
from tests.pages.conftest import HTMX, binding, client_for, flashed, make_waiting

pytestmark = pytest.mark.django_db


def edit_url(action: Action) -> str:
    return reverse("inbox_edit", args=[action.pk])


def edited(action: Action, step: str, **args) -> dict:
    return {**binding(action), **{f"arg__{k}": v for k, v in args.items()}, "step": step}


def test_the_edit_form_shows_each_argument_with_its_current_value(operator_client, tenant):
    action = make_waiting(tenant, args={"resolution": "fixed"})

    page = operator_client.get(edit_url(action)).content.decode()

    assert 'name="arg__resolution"' in page
    assert 'value="fixed"' in page
    assert f'value="{action.intent_digest}"' in page


def test_an_htmx_edit_form_is_the_fragment_alone(operator_client, tenant):
    action = make_waiting(tenant)

    page = operator_client.get(edit_url(action), **HTMX).content.decode()

    assert page.lstrip().startswith('<section class="edit-panel"')


def test_reviewing_an_edit_shows_the_diff_and_changes_nothing_yet(operator_client, tenant):
    action = make_waiting(tenant, args={"resolution": "fixed"})

    response = operator_client.post(
        edit_url(action), edited(action, "review", resolution="duplicate"), **HTMX
    )

    page = response.content.decode()
    assert response.status_code == 200
    assert "<del><code>&quot;fixed&quot;</code></del>" in page
    assert "<ins><code>&quot;duplicate&quot;</code></ins>" in page
    assert 'value="approve"' in page
    assert Action.objects.filter(run=action.run).count() == 1


def test_a_plain_edit_then_approve_supersedes_the_old_intent_and_approves_the_new(
    operator_client, tenant, operator
):
    action = make_waiting(tenant, args={"resolution": "fixed"})

    response = operator_client.post(
        edit_url(action), edited(action, "approve", resolution="duplicate")
    )

    assert response.status_code == 302
    new = Action.objects.get(run=action.run, action_id="close-ticket~2")
    action.refresh_from_db()
    assert action.status == "superseded"
    assert new.supersedes_id == action.pk
    assert new.args == {"resolution": "duplicate"}
    assert new.idempotency_key != action.idempotency_key
    assert new.intent_digest != action.intent_digest
    assert new.status == "approved"
    assert new.approvals.get().approver == operator
    assert any("supersedes close-ticket" in message for message in flashed(response))


def test_an_htmx_edit_then_approve_replaces_the_item_with_the_new_intent(operator_client, tenant):
    action = make_waiting(tenant, args={"resolution": "fixed"})

    response = operator_client.post(
        edit_url(action), edited(action, "approve", resolution="duplicate"), **HTMX
    )

    assert response.status_code == 200
    assert response["HX-Retarget"] == f"#action-{action.pk}"
    assert response["HX-Reswap"] == "outerHTML"
    new = Action.objects.get(run=action.run, action_id="close-ticket~2")
    page = response.content.decode()
    assert f'id="action-{new.pk}"' in page
    assert "Edited and approved" in page
    assert new.idempotency_key in page
    assert "<ins><code>&quot;duplicate&quot;</code></ins>" in page


def test_an_edit_the_tool_refuses_creates_nothing(operator_client, tenant):
    action = make_waiting(tenant, args={"resolution": "fixed"})

    response = operator_client.post(
        edit_url(action), edited(action, "approve", resolution="x" * 65), **HTMX
    )

    assert response.status_code == 422
    action.refresh_from_db()
    assert action.status == "waiting_approval"
    assert Action.objects.filter(run=action.run).count() == 1


def test_an_edit_of_an_intent_that_changed_meanwhile_is_refused(operator_client, tenant):
    action = make_waiting(tenant, args={"resolution": "fixed"})
    stale = {
        **edited(action, "approve", resolution="duplicate"),
        "seen_digest": "sha256:" + "1" * 64,
    }

    response = operator_client.post(edit_url(action), stale, **HTMX)

    assert response.status_code == 409
    assert "Nothing was approved" in response.content.decode()
    action.refresh_from_db()
    assert action.status == "waiting_approval"
    assert not Approval.objects.filter(action__run=action.run).exists()


def test_an_edit_that_changes_nothing_is_not_offered_for_approval(operator_client, tenant):
    action = make_waiting(tenant, args={"resolution": "fixed"})

    response = operator_client.post(
        edit_url(action), edited(action, "review", resolution="fixed"), **HTMX
    )

    page = response.content.decode()
    assert "Nothing changed" in page
    assert 'value="approve"' not in page


def test_with_four_eyes_the_edited_intent_waits_for_another_operator(operator_client, tenant):
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=True,
        required_approvals=1,
        approval_seconds=3600,
        actor="tests",
    )
    action = make_waiting(tenant, args={"resolution": "fixed"})

    response = operator_client.post(
        edit_url(action), edited(action, "approve", resolution="duplicate"), **HTMX
    )

    assert "Edited; waiting for a second operator" in response.content.decode()
    new = Action.objects.get(run=action.run, action_id="close-ticket~2")
    assert new.status == "waiting_approval"


def test_editing_another_tenants_intent_is_not_found(client, tenant, other_tenant):
    theirs = make_waiting(other_tenant)
    client_for(client, make_user(tenant, "operator"))

    assert client.get(edit_url(theirs)).status_code == 404
    response = client.post(edit_url(theirs), edited(theirs, "approve", resolution="x"))
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.status == "waiting_approval"


def test_an_auditor_may_not_edit(client, tenant):
    action = make_waiting(tenant)
    client_for(client, make_user(tenant, "auditor"))

    assert client.get(edit_url(action)).status_code == 403
