"""A standing rule end to end: an admin writes it on /policies/ in the browser, an agent's
intent through the API is approved by it at once, a real worker executes it once, and the
policies page shows the use."""

from __future__ import annotations

import pytest
from countersign_client import Countersign
from django.urls import reverse
from playwright.sync_api import expect

from control.services import api_token_create
from runs.models import Action, StandingGrant
from sandbox.models import Effect
from tests.browser.conftest import log_in, screenshot
from tests.factories import make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def test_a_rule_written_in_the_browser_approves_an_agents_close_and_a_worker_executes_it(
    page, live_server, workers
):
    tenant = make_tenant()
    make_user(tenant, "admin", username="ada")
    log_in(page, "ada")
    page.goto(reverse("tool_policies"))
    page.get_by_text("Propose a rule").click()
    form = page.locator("#new-rule")
    form.get_by_label("Tool").select_option("ticket.close")
    form.get_by_label("Name").fill("close tickets the customer confirmed, 10 a day")
    form.get_by_label("Target pattern").fill("ticket-[0-9]+")
    form.get_by_label("Argument bounds").fill('{"resolution": {"enum": ["fixed"]}}')
    form.get_by_label("Uses at most").fill("10")
    form.get_by_role("button", name="Propose the rule").click()
    expect(page.locator(".messages")).to_contain_text("Proposed the rule")
    rule = StandingGrant.objects.get()
    assert rule.status == "active"

    _, token = api_token_create(tenant=tenant, name="agent", actor="tests")
    client = Countersign(live_server.url, token=token)
    run = client.create_run("close ticket-12 once the customer confirmed")
    seen = client.record_observation(
        run["id"],
        source="ticket.lookup",
        ref="ticket-12",
        summary="works now",
        content_hash="sha256:" + "1" * 64,
    )
    proposed = client.propose_action(
        run["id"],
        action_id="close-12",
        tool="ticket.close",
        target="ticket-12",
        args={"resolution": "fixed"},
        observation_id=seen["id"],
    )
    assert proposed["status"] == "approved"
    assert proposed["decision"]["approvals"][0]["rule"] == rule.name

    assert workers.run_burst() == 0

    action = Action.objects.get()
    assert action.status == "succeeded"
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
    page.goto(reverse("tool_policies"))
    row = page.locator(f"#rule-{rule.pk}")
    expect(row.locator("[data-uses]")).to_have_text("1 of 10")
    expect(row.locator("[data-remaining]")).to_contain_text("9 uses")
    screenshot(page, "policies-with-a-standing-rule")
    page.goto(reverse("run_detail", args=[action.run_id]))
    expect(page.locator("[data-rule]").first).to_contain_text(rule.name)
    screenshot(page, "run-approved-by-a-standing-rule")
