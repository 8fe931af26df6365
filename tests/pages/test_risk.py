"""Risk tiers: a tool policy rates its tool low, high or irreversible (or leaves it to the
tool's nature), each intent keeps the tier it was proposed under, and the inbox shows it as a
badge, filters by it and sorts by it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from runs.models import Risk, ToolPolicy
from runs.record.signed_rows import POLICY_ROWS
from runs.selectors import pages as page_selectors
from runs.selectors import policy_for
from runs.services import PlanItem, plan_propose
from tests.factories import make_action, make_observation, make_policy, make_run, make_user
from tests.pages.conftest import HTMX, client_for, make_waiting

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("tool", "tier"),
    [
        ("ticket.lookup", Risk.LOW),  # a read changes nothing
        ("ticket.close", Risk.HIGH),  # a write
        ("payment.charge", Risk.HIGH),  # undone by payment.refund
        ("notify.send", Risk.IRREVERSIBLE),  # nothing undoes it, a resend is a second one
        ("no.such_tool", Risk.HIGH),
    ],
)
def test_without_a_rating_the_tools_nature_decides(tenant, tool, tier):
    assert policy_for(tenant=tenant, tool=tool).risk == tier


def test_a_rating_is_frozen_on_each_intent_proposed_under_it(tenant):
    make_policy(tenant, "ticket.close", risk=Risk.IRREVERSIBLE)
    before = make_waiting(tenant)
    make_policy(tenant, "ticket.close", risk=Risk.LOW)
    after = make_waiting(tenant, action_id="close-again", target="ticket-8")
    assert (before.risk, after.risk) == (Risk.IRREVERSIBLE, Risk.LOW)


def test_a_policy_row_from_before_the_rating_still_verifies_and_a_rating_is_signed(tenant):
    policy = make_policy(tenant, "ticket.close")
    assert policy.risk is None
    assert b"risk" not in POLICY_ROWS.payload(policy)  # as rows signed before the field
    rated = make_policy(tenant, "ticket.close", risk=Risk.LOW)
    assert POLICY_ROWS.verifies(rated)
    ToolPolicy.objects.filter(pk=rated.pk).update(risk=Risk.IRREVERSIBLE)
    tampered = policy_for(tenant=tenant, tool="ticket.close")
    assert tampered.problem  # the rating is covered: an edited row is read as the strictest
    assert tampered.risk == Risk.IRREVERSIBLE


def test_an_admin_rates_a_tool_on_the_policies_page_and_a_bad_rating_is_refused(client, tenant):
    client_for(client, make_user(tenant, "admin"))
    base = {"tool": "ticket.close", "needs_approval": "on", "required_approvals": "1"}
    page = client.get(reverse("tool_policies")).content.decode()
    assert "by its nature: irreversible" in page  # notify.send's row

    refused = client.post(reverse("tool_policies"), {**base, "approval_minutes": "5", "risk": "7"})
    assert refused.status_code == 422
    assert "Risk: Select a valid choice" in refused.content.decode()
    assert not ToolPolicy.objects.filter(tenant=tenant, tool="ticket.close").exists()

    saved = client.post(reverse("tool_policies"), {**base, "approval_minutes": "5", "risk": "3"})
    assert saved.status_code == 302
    assert ToolPolicy.objects.get(tenant=tenant, tool="ticket.close").risk == Risk.IRREVERSIBLE


def test_the_inbox_badges_filters_and_sorts_by_risk(operator_client, tenant, monkeypatch):
    make_policy(tenant, "ticket.close", risk=Risk.LOW)
    low = make_waiting(tenant, action_id="close-1", target="ticket-1")
    irreversible = make_action(
        make_run(tenant), tool="notify.send", target="ops@example.com", args={"body": "hi"}
    )
    high = make_action(
        make_run(tenant),
        tool="payment.charge",
        target="cus_1",
        args={"amount_cents": 100, "currency": "EUR"},
    )
    page = operator_client.get(reverse("inbox")).content.decode()
    badge = re.search(
        rf'id="action-{irreversible.pk}".*?data-risk title="([^"]*)">([^<]*)<', page, re.S
    )
    assert badge.groups() == ("cannot be undone", "irreversible risk")

    def shown(query: dict) -> list:
        response = operator_client.get(reverse("inbox"), query)
        return [item.action.pk for item in response.context["items"]]

    assert shown({"risk": Risk.LOW}) == [low.pk]
    assert shown({"sort": "risk"}) == [irreversible.pk, high.pk, low.pk]
    assert set(shown({})) == {low.pk, high.pk, irreversible.pk}

    # Highest risk first holds across pages: the cursor carries the tier.
    monkeypatch.setattr(page_selectors, "INBOX_PAGE_SIZE", 2)
    first = operator_client.get(reverse("inbox"), {"sort": "risk"})
    assert [item.action.pk for item in first.context["items"]] == [irreversible.pk, high.pk]
    rest = operator_client.get(first.context["next_url"], **HTMX)
    assert [item.action.pk for item in rest.context["items"]] == [low.pk]


def test_a_plan_wears_the_highest_tier_of_its_intents(operator_client, tenant):
    make_policy(tenant, "payment.refund", risk=Risk.IRREVERSIBLE)
    run = make_run(tenant)
    items = [
        PlanItem(action_id="close", tool="ticket.close", target="ticket-3", args={}),
        PlanItem(
            action_id="refund",
            tool="payment.refund",
            target="ch_" + "0" * 32,
            args={"amount_cents": 100},
        ),
    ]
    plan_propose(run=run, items=items, observation=make_observation(run), proposed_by="agent")
    page = operator_client.get(reverse("inbox")).content.decode()
    plan_card = page[page.index("data-plan=") :]
    assert re.search(
        r'class="badge risk-irreversible" data-risk[^>]*>irreversible risk<', plan_card
    )
