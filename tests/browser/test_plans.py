"""A plan in the inbox, in a real browser: one card for 100 intents, approved with one click,
executed by a real worker, each under its own key."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from runs.models import Action
from runs.services import PlanItem, plan_propose
from sandbox.models import Effect
from tests.browser.conftest import log_in, screenshot
from tests.factories import make_observation, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def test_one_click_approves_a_plan_of_100_and_a_worker_sends_each_once(page, workers):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    run = make_run(tenant, goal="tell every customer the outage is over")
    plan, _ = plan_propose(
        run=run,
        items=[
            PlanItem(
                f"notify-{n:03d}",
                "notify.send",
                f"customer-{n:03d}@example.com",
                {"body": "The outage is over."},
            )
            for n in range(1, 101)
        ],
        observation=make_observation(run, summary="the outage list: 100 customers"),
        proposed_by="agent-token",
    )
    log_in(page, "olivia")
    card = page.locator(f"#plan-{plan.pk}")
    expect(card).to_contain_text("Plan of 100 intents")
    expect(card.locator("[data-differing]")).to_have_text("target")
    expect(card.locator("[data-plan-items] tbody tr")).to_have_count(50)
    expect(card).to_contain_text("and 50 more")
    screenshot(page, "plan-in-the-inbox")

    card.get_by_role("button", name="Approve all 100").click()

    expect(page.locator(".messages")).to_contain_text("Approved all 100")
    assert set(Action.objects.filter(plan=plan).values_list("status", flat=True)) == {"approved"}
    assert workers.run_burst() == 0
    assert Effect.objects.filter(tool="notify.send").count() == 100
    assert set(Action.objects.filter(plan=plan).values_list("status", flat=True)) == {"succeeded"}
    page.goto(reverse("run_detail", args=[run.pk]))
    expect(page.locator(".badge.phase-running")).to_be_visible()
