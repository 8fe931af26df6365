"""The run pages in a real browser: the list, and cancelling with a confirmation that shows
what is done, in doubt and not started."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from runs.models import Action
from tests.browser.conftest import log_in, screenshot
from tests.browser.test_inbox import waiting_close
from tests.factories import make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def test_cancel_asks_for_confirmation_then_shows_the_report(page):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    make_run(tenant, goal="summarise last week's incidents")
    action = waiting_close(tenant)
    log_in(page, "olivia")
    page.goto(reverse("run_list"))
    expect(page.locator("table.runs tbody tr")).to_have_count(2)
    screenshot(page, "run-list")

    page.goto(reverse("run_detail", args=[action.run_id]))
    page.get_by_role("link", name="Cancel run…").click()
    confirm = page.locator("[data-cancel-confirm]")
    expect(confirm).to_contain_text("Not started (will be cancelled)")
    expect(confirm).to_contain_text("close-ticket")
    assert Action.objects.get(pk=action.pk).status == "waiting_approval"
    confirm.get_by_label("Why cancel").fill("the customer withdrew the request")
    screenshot(page, "run-cancel-confirm")
    confirm.get_by_role("button", name="Yes, cancel the run").click()

    expect(page.locator("#stop-title")).to_have_text("Cancelled: effects report")
    expect(page.locator("[data-cancel-confirm]")).to_have_count(0)
    expect(page.get_by_role("link", name="Cancel run…")).to_have_count(0)
    expect(page.locator(".summary")).to_contain_text("Cancelled")
    screenshot(page, "run-cancelled-report")
    action.refresh_from_db()
    assert action.status == "cancelled"


def test_an_admin_sets_a_tool_policy_in_the_browser(page):
    tenant = make_tenant()
    make_user(tenant, "admin", username="ada")
    log_in(page, "ada")
    page.get_by_role("link", name="Policies").click()
    row = page.locator("#policy-ticket-close")

    row.get_by_label("ticket.close: four eyes").check()
    row.get_by_label("ticket.close: approvals needed").fill("2")
    row.get_by_role("button", name="Save").click()

    expect(page.locator(".message.success")).to_contain_text("Saved the policy for ticket.close")
    expect(page.locator("#policy-ticket-close")).to_contain_text("set for this tenant")
    screenshot(page, "tool-policies")
    action = waiting_close(tenant)
    assert (action.four_eyes, action.required_approvals) == (True, 2)
