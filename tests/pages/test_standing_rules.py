"""Standing rules on /policies/: an admin proposes one with its limits, another approves it
where four eyes apply, the page shows each rule's uses, what remains and its last use, and a
revocation stops it at once; the run page and the receipts ledger say which rule approved."""

from __future__ import annotations

import pytest
from django.urls import reverse

from control.models import AuditEntry
from runs.models import StandingGrant
from tests.api.support import execute_with_receipt
from tests.factories import make_action, make_policy, make_run, make_user
from tests.pages.conftest import client_for, flashed

pytestmark = pytest.mark.django_db

RULE = {
    "tool": "payment.refund",
    "name": "refunds under $50",
    "target_pattern": "ch_[0-9a-f]{32}",
    "arg_bounds": '{"amount_cents": {"maximum": 5000}}',
    "max_uses": "3",
    "uses_per_hour": "20",
    "amount_argument": "amount_cents",
    "amount_cap": "10000",
    "days": "7",
}
CHARGE = "ch_" + "c" * 32


def refund(tenant, cents: int, action_id: str):
    return make_action(
        make_run(tenant),
        tool="payment.refund",
        target=CHARGE,
        args={"amount_cents": cents},
        action_id=action_id,
    )


def test_an_admin_proposes_a_rule_that_approves_intents_and_the_pages_say_so(client, tenant):
    client_for(client, make_user(tenant, "admin", username="ada"))

    response = client.post(reverse("standing_rule_create"), RULE)

    assert response.status_code == 302
    assert any("Proposed the rule 'refunds under $50'" in m for m in flashed(response))
    rule = StandingGrant.objects.get()
    assert (rule.status, rule.arg_bounds, rule.max_uses) == (
        "active",
        {"amount_cents": {"maximum": 5000}},
        3,
    )
    action = refund(tenant, 1200, "refund-1")
    assert action.status == "approved"
    execute_with_receipt(action, receipt_id="re_1")

    page = client.get(reverse("tool_policies")).content.decode()
    row = page[page.index(f'id="rule-{rule.pk}"') :]
    assert "1 of 3" in row
    assert "2 uses" in row
    assert "8800 of 10000" in row
    assert "never" not in row[: row.index("</tr>")]
    run_page = client.get(reverse("run_detail", args=[action.run_id])).content.decode()
    assert "standing rule <q>refunds under $50</q></span>, approved by ada" in run_page
    ledger = client.get(reverse("receipt_ledger")).content.decode()
    assert "approved by rule <q>refunds under $50</q>" in ledger


def test_a_rule_with_bad_limits_is_refused_with_the_reason_and_nothing_saved(client, tenant):
    client_for(client, make_user(tenant, "admin"))

    not_json = client.post(reverse("standing_rule_create"), {**RULE, "arg_bounds": "{max: 5}"})
    unknown = client.post(
        reverse("standing_rule_create"), {**RULE, "arg_bounds": '{"amount": {"maximum": 5}}'}
    )

    assert not_json.status_code == unknown.status_code == 422
    assert "not JSON" in not_json.content.decode()
    assert "the tool has no argument" in unknown.content.decode()
    assert 'value="refunds under $50"' in unknown.content.decode()  # the form keeps its input
    assert not StandingGrant.objects.exists()


def test_four_eyes_a_second_admin_activates_the_rule_and_a_revocation_stops_it(client, tenant):
    make_policy(tenant, "payment.refund", four_eyes=True)
    proposer = make_user(tenant, "admin", username="ada")
    second = make_user(tenant, "admin", username="bo")
    client_for(client, proposer)
    client.post(reverse("standing_rule_create"), RULE)
    rule = StandingGrant.objects.get()
    assert rule.status == "proposed"

    own = client.post(reverse("standing_rule_approve", args=[rule.pk]))
    assert any("four eyes" in m for m in flashed(own))
    client_for(client, second)
    approved = client.post(reverse("standing_rule_approve", args=[rule.pk]))
    assert any("it is active" in m for m in flashed(approved))
    assert refund(tenant, 100, "refund-1").status == "approved"

    without_reason = client.post(reverse("standing_rule_revoke", args=[rule.pk]), {"reason": ""})
    assert any("say why" in m for m in flashed(without_reason))
    revoked = client.post(
        reverse("standing_rule_revoke", args=[rule.pk]), {"reason": "refund fraud"}
    )

    assert any("approves nothing more" in m for m in flashed(revoked))
    assert refund(tenant, 100, "refund-2").status == "waiting_approval"
    assert AuditEntry.objects.filter(
        verb="standing_grant.revoke", actor="bo", reason="refund fraud"
    ).exists()
    page = client.get(reverse("tool_policies")).content.decode()
    assert "by bo: <q>refund fraud</q>" in page


def test_a_stored_rule_whose_pattern_is_now_refused_says_so_on_the_policies_page(client, tenant):
    client_for(client, make_user(tenant, "admin", username="ada"))
    client.post(reverse("standing_rule_create"), RULE)
    rule = StandingGrant.objects.get()
    # Written before patterns were restricted to their linear-time subset.
    StandingGrant.objects.filter(pk=rule.pk).update(target_pattern=r"(ch_)\1")

    page = client.get(reverse("tool_policies")).content.decode()

    row = page[page.index(f'id="rule-{rule.pk}"') :]
    assert "admits nothing: target_pattern uses backreferences" in row[: row.index("</tr>")]
    assert refund(tenant, 1200, "refund-1").status == "waiting_approval"
