"""Admins set each tool's approval policy per tenant; new requests follow it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from control.models import AuditEntry
from runs.models import ToolPolicy
from tests.factories import make_policy, make_user
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


ESCALATION = {
    **POLICY,
    "escalation_minutes": "30",
    "escalation_contacts": "lead@example.com; duty@example.com, lead@example.com",
    "link_only_decisions": "on",
}


def test_an_admin_sets_an_escalation_and_link_only_decisions(client, tenant):
    client_for(client, make_user(tenant, "admin"))

    response = client.post(reverse("tool_policies"), ESCALATION)

    assert response.status_code == 302
    policy = ToolPolicy.objects.get(tenant=tenant, tool="ticket.close")
    assert policy.escalation_seconds == 1800
    assert policy.escalation_contacts == ["lead@example.com", "duty@example.com"]
    assert policy.link_only_decisions is True
    page = client.get(reverse("tool_policies")).content.decode()
    assert 'value="lead@example.com, duty@example.com"' in page
    assert re.search(r'id="id_ticket-close_escalation_minutes"\s+value="30"', page)


def test_a_bad_escalation_address_is_named_and_nothing_is_saved(client, tenant):
    client_for(client, make_user(tenant, "admin"))
    contacts = "lead@example.com, bob@, not an address"

    response = client.post(
        reverse("tool_policies"), {**ESCALATION, "escalation_contacts": contacts}
    )

    assert response.status_code == 422
    page = response.content.decode()
    assert "Escalation contacts: “bob@”, “not”, “an”, “address” are not email addresses." in page
    assert f'value="{contacts}"' in page  # what was typed stays, to be corrected
    assert not ToolPolicy.objects.filter(tenant=tenant).exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"escalation_contacts": ""}, "Escalation contacts: Name at least one address"),
        ({"escalation_minutes": ""}, "Escalate after (minutes): Say after how many minutes"),
        ({"escalation_minutes": "0"}, "Escalate after (minutes): Ensure this value is greater"),
    ],
)
def test_an_escalation_needs_both_a_time_and_a_contact(client, tenant, changes, message):
    client_for(client, make_user(tenant, "admin"))

    response = client.post(reverse("tool_policies"), {**ESCALATION, **changes})

    assert response.status_code == 422
    assert message in response.content.decode()
    assert not ToolPolicy.objects.filter(tenant=tenant).exists()


def test_a_policy_row_that_does_not_verify_is_flagged_until_an_admin_saves_it(client, tenant):
    client_for(client, make_user(tenant, "admin"))
    make_policy(tenant, "ticket.close", needs_approval=True)
    ToolPolicy.objects.filter(tenant=tenant).update(needs_approval=False)  # around the service

    page = client.get(reverse("tool_policies")).content.decode()
    assert "Does not verify (bad_mac)" in page
    assert make_waiting(tenant).needs_approval is True

    saved = {"tool": "ticket.close", "required_approvals": "1", "approval_minutes": "15"}
    assert client.post(reverse("tool_policies"), saved).status_code == 302
    assert "Does not verify" not in client.get(reverse("tool_policies")).content.decode()
