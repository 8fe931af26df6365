"""Admins set each tool's approval policy per tenant; new requests follow it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from control.models import AuditEntry
from runs.models import ToolPolicy
from tests.factories import make_user
from tests.pages.conftest import client_for, flashed, make_waiting

pytestmark = pytest.mark.django_db

POLICY = {
    "tool": "ticket.close",
    "needs_approval": "on",
    "four_eyes": "on",
    "required_approvals": "2",
    "approval_minutes": "15",
}


def test_an_admin_sees_every_tool_with_its_default_policy(client, tenant):
    client_for(client, make_user(tenant, "admin"))

    page = client.get(reverse("tool_policies")).content.decode()

    for tool in ("ticket.close", "ticket.lookup", "notify.send", "payment.charge"):
        assert f"<code>{tool}</code>" in page
    assert "tool default" in page


def test_an_admin_sets_a_policy_that_new_requests_follow(client, tenant):
    client_for(client, make_user(tenant, "admin", username="ada"))

    response = client.post(reverse("tool_policies"), POLICY)

    assert response.status_code == 302
    assert any("Saved the policy for ticket.close" in m for m in flashed(response))
    policy = ToolPolicy.objects.get(tenant=tenant, tool="ticket.close")
    assert (policy.four_eyes, policy.required_approvals, policy.approval_seconds) == (True, 2, 900)
    action = make_waiting(tenant)
    assert (action.four_eyes, action.required_approvals) == (True, 2)
    assert AuditEntry.objects.filter(verb="tool_policy.set", actor="ada").exists()


def test_several_approvals_without_approval_is_refused(client, tenant):
    client_for(client, make_user(tenant, "admin"))

    response = client.post(reverse("tool_policies"), {**POLICY, "needs_approval": ""})

    assert response.status_code == 422
    assert "only apply when the tool needs approval" in response.content.decode()
    assert not ToolPolicy.objects.filter(tenant=tenant).exists()


def test_a_policy_changes_only_its_own_tenant(client, tenant, other_tenant):
    client_for(client, make_user(tenant, "admin"))

    client.post(reverse("tool_policies"), POLICY)

    assert not ToolPolicy.objects.filter(tenant=other_tenant).exists()


@pytest.mark.parametrize("role", ["operator", "reconciler", "auditor"])
def test_only_an_admin_may_see_or_set_policies(client, tenant, role):
    client_for(client, make_user(tenant, role))

    assert client.get(reverse("tool_policies")).status_code == 403
    assert client.post(reverse("tool_policies"), POLICY).status_code == 403
    assert not ToolPolicy.objects.filter(tenant=tenant).exists()
