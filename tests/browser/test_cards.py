"""The inbox cards in a real browser, at 1280 and 390 px: each leads with what Approve will do
in its tool's words, says its risk in words and colour, and sorts by it; a plan adds its
money up by currency."""

from __future__ import annotations

import pytest
import requests
from django.urls import reverse
from playwright.sync_api import expect

from runs.models import Risk
from tests.browser.conftest import log_in, screenshot
from tests.factories import (
    make_action,
    make_policy,
    make_run,
    make_tenant,
    make_user,
)
from tests.pages.test_summary_line import charges_in_two_currencies

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting():
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    make_policy(tenant, "payment.charge", risk=Risk.IRREVERSIBLE)
    close = make_action(make_run(tenant, goal="close ticket-7 once the customer confirmed"))
    charge = make_action(
        make_run(tenant, goal="bill the enterprise renewal"),
        action_id="renewal",
        tool="payment.charge",
        target="cus_42",
        args={"amount_cents": 5_000_000, "currency": "EUR"},
    )
    charges_in_two_currencies(tenant)
    return close, charge


def test_each_card_says_what_approve_will_do_and_its_risk(page, waiting):
    close, charge = waiting
    log_in(page, "olivia")

    charge_card = page.locator(f"#action-{charge.pk}")
    expect(charge_card.locator("[data-summary]")).to_have_text("Charge 50,000.00 EUR to cus_42")
    expect(charge_card.locator("[data-risk]")).to_have_text("irreversible risk")
    expect(charge_card.locator("[data-tool-text]")).to_contain_text("undone by payment.refund")
    close_card = page.locator(f"#action-{close.pk}")
    expect(close_card.locator("[data-summary]")).to_have_text("Close ticket-7")
    expect(close_card.locator("[data-risk]")).to_have_text("high risk")
    expect(close_card.locator("[data-tool-text]")).to_contain_text("cannot be undone")
    plan = page.locator("[data-plan]")
    expect(plan.locator('[data-total="amount_cents"]')).to_have_text("1,525.00 EUR · 1,250 JPY")
    expect(plan.locator("[data-summary]").nth(2)).to_have_text("Charge 1,250 JPY to cus_3")

    charge_card.scroll_into_view_if_needed()
    screenshot(page, "inbox-cards")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "inbox-cards-on-a-phone")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the inbox scrolls sideways on a phone: {width} px wide"
    page.set_viewport_size({"width": 1280, "height": 900})

    page.get_by_label("Order").select_option("risk")
    page.wait_for_url("**sort=risk**")
    cards = page.locator("article.item:not(.plan)")
    expect(cards.first).to_have_id(f"action-{charge.pk}")
    page.get_by_label("Risk", exact=True).select_option(str(Risk.HIGH))
    page.wait_for_url("**risk=2**")
    expect(cards).to_have_count(1)
    expect(cards.first).to_have_id(f"action-{close.pk}")
    page.goto(reverse("run_detail", args=[charge.run_id]))
    expect(page.locator("[data-summary]")).to_have_text("Charge 50,000.00 EUR to cus_42")


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_reading_the_target_now_says_when_the_goal_already_holds(page, sandbox):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    close = make_action(make_run(tenant), target="ticket-7")
    requests.post(
        f"{sandbox}tickets/ticket-7/close",
        json={"args": {}},
        headers={"Idempotency-Key": "closed-by-someone-else"},
        timeout=5,
    ).raise_for_status()
    log_in(page, "olivia")

    card = page.locator(f"#action-{close.pk}")
    card.get_by_role("link", name="Read ticket-7 as it is now").click()
    expect(card.locator("[data-goal-holds]")).to_contain_text(
        "ticket-7 already is what this write would make it"
    )
    expect(card.locator("[data-target-now] pre")).to_contain_text('"status": "closed"')
    screenshot(page, "inbox-card-target-now")
