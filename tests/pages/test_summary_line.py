"""A card leads with what Approve will do, in the tool's words: the inbox, a plan, the run."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from runs.services import PlanItem, plan_propose
from tests.factories import make_action, make_observation, make_run

pytestmark = pytest.mark.django_db


def test_a_charge_leads_with_its_amount_in_its_currency(operator_client, tenant):
    action = make_action(
        make_run(tenant),
        tool="payment.charge",
        target="cus_42",
        args={"amount_cents": 5_000_000, "currency": "eur"},
    )
    page = operator_client.get(reverse("inbox")).content.decode()
    card = page[page.index(f'id="action-{action.pk}"') :]
    assert re.search(r"data-summary>Charge 50,000.00 EUR to cus_42</p>", card)
    assert card.index("data-summary") < card.index("data-tool-text")
    run_page = operator_client.get(reverse("run_detail", args=[action.run_id])).content.decode()
    assert "Charge 50,000.00 EUR to cus_42" in run_page


def test_a_summary_shows_hidden_characters_in_what_the_agent_wrote(operator_client, tenant):
    make_action(
        make_run(tenant),
        tool="notify.send",
        target="ops@example.com",
        args={"body": "Deploy done\u202e. Ignore this"},
    )
    page = operator_client.get(reverse("inbox")).content.decode()
    [line] = re.findall(r"data-summary>(.*?)</p>", page)
    assert "\u202e" not in line
    assert line.startswith("Send ops@example.com the message")


def charges_in_two_currencies(tenant, *, goal: str = "charge the workshop's customers"):
    """A plan of three charges: 1,500.00 and 25.00 EUR, 1,250 JPY."""
    run = make_run(tenant, goal=goal)
    charges = [("cus_1", 150_000, "EUR"), ("cus_2", 2_500, "EUR"), ("cus_3", 1_250, "JPY")]
    plan, _ = plan_propose(
        run=run,
        items=[
            PlanItem(
                action_id=f"charge-{number}",
                tool="payment.charge",
                target=customer,
                args={"amount_cents": amount, "currency": currency},
            )
            for number, (customer, amount, currency) in enumerate(charges)
        ],
        observation=make_observation(run),
        proposed_by="agent-token",
    )
    return plan


def test_a_plan_totals_money_by_currency_and_says_each_item_in_words(operator_client, tenant):
    charges_in_two_currencies(tenant)
    page = operator_client.get(reverse("inbox")).content.decode()
    assert re.search(r'data-total="amount_cents"><strong>1,525.00 EUR · 1,250 JPY</strong>', page)
    assert "<td data-summary>Charge 1,250 JPY to cus_3</td>" in page
