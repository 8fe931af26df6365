"""The inbox in a real browser: click, keyboard and htmx against the live server, with real
RQ workers where a write must actually happen."""

from __future__ import annotations

import pytest
import requests
from django.urls import reverse
from playwright.sync_api import expect

from control.services import api_token_create
from runs.models import Action
from runs.services import action_edit_and_approve, approval_expire, tool_policy_set
from tests.browser.conftest import log_in, screenshot
from tests.factories import make_action, make_observation, make_run, make_tenant, make_user
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def waiting_close(tenant, *, target: str = "ticket-7", resolution: str = "fixed") -> Action:
    run = make_run(
        tenant,
        goal=f"close {target} once the customer confirms the fix",
        budget_limit=10,
        plan={"summary": f"look up {target}, wait for the customer, close it"},
    )
    observation = make_observation(run, summary=f"customer wrote on {target}: works now")
    return make_action(run, target=target, args={"resolution": resolution}, observation=observation)


def test_an_approval_in_the_inbox_is_executed_by_a_worker_and_its_receipt_shows(page, workers):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    action = waiting_close(tenant)
    log_in(page, "olivia")
    item = page.locator(f"#action-{action.pk}")
    expect(item).to_contain_text("customer wrote on ticket-7: works now")
    screenshot(page, "inbox-before-approve")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "inbox-on-a-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    item.get_by_role("button", name="Approve", exact=True).click()

    expect(item.locator(".outcome")).to_contain_text("Approved. Queued for a worker.")
    assert workers.run_burst() == 0
    action.refresh_from_db()
    assert action.status == "succeeded"
    page.goto(reverse("run_detail", args=[action.run_id]))
    receipt = page.locator("[data-receipt]")
    expect(receipt).to_contain_text(action.receipt.receipt_id)
    expect(receipt).to_contain_text("digest matches")
    expect(page.locator(".checkpoints .badge.ok").first).to_have_text("verified")
    screenshot(page, "run-page-with-receipt")


def test_a_rejection_reason_reaches_the_agent_through_the_api(page, live_server):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    action = waiting_close(tenant)
    _, token = api_token_create(tenant=tenant, name="agent", actor="tests")
    log_in(page, "olivia")
    item = page.locator(f"#action-{action.pk}")

    item.get_by_text("Reject…").click()
    item.get_by_label("Reason").select_option("Wrong target")
    item.get_by_label("Details for the agent").fill("close ticket-8, the duplicate")
    screenshot(page, "inbox-reject-with-reason")
    item.get_by_role("button", name="Reject and tell the agent").click()

    expect(item.locator(".outcome")).to_contain_text("Rejected")
    action.refresh_from_db()
    assert action.status == "rejected"
    assert action.decision_reason == "Wrong target: close ticket-8, the duplicate"
    answer = requests.get(
        f"{live_server.url}/api/v1/actions/{action.pk}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    decision = answer.json()["decision"]
    assert decision["outcome"] == "reject"
    assert decision["reason"] == "Wrong target: close ticket-8, the duplicate"


def test_edit_then_approve_gives_a_new_key_and_supersedes_the_old_intent(page):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    action = waiting_close(tenant)
    log_in(page, "olivia")
    item = page.locator(f"#action-{action.pk}")

    item.get_by_role("link", name="Edit then approve…").click()
    panel = item.locator(".edit-panel")
    panel.get_by_label("resolution").fill("duplicate of ticket-8")
    panel.get_by_role("button", name="Review changes").click()
    expect(panel.locator("table.diff")).to_contain_text('"duplicate of ticket-8"')
    screenshot(page, "inbox-edit-review-diff")
    panel.get_by_role("button", name="Approve the edited intent").click()

    new = wait_until(
        lambda: Action.objects.filter(run=action.run, action_id="close-ticket~2").first()
    )
    new_item = page.locator(f"#action-{new.pk}")
    expect(new_item.locator(".outcome")).to_contain_text("Edited and approved")
    expect(new_item.locator(".outcome")).to_contain_text(new.idempotency_key)
    action.refresh_from_db()
    assert action.status == "superseded"
    assert new.status == "approved"
    assert new.idempotency_key != action.idempotency_key
    assert new.intent_digest != action.intent_digest
    assert new.args == {"resolution": "duplicate of ticket-8"}
    screenshot(page, "inbox-edit-approved")


def test_bulk_approval_refuses_the_stale_request_and_approves_the_rest(page):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    colleague = make_user(tenant, "operator", username="colin")
    first, stale, third = (waiting_close(tenant, target=f"ticket-{n}") for n in (7, 8, 9))
    log_in(page, "olivia")
    for action in (first, stale, third):
        page.locator(f"#select-{action.pk}").check()
    expect(page.locator("[data-selected-count]")).to_have_text("3 selected")

    stale.refresh_from_db()
    action_edit_and_approve(
        action=stale,
        editor=colleague,
        args={"resolution": "wontfix"},
        seen_digest=stale.intent_digest,
        seen_state_version=stale.base_version,
    )
    page.get_by_role("button", name="Approve selected").click()

    results = page.locator("[data-bulk-results]")
    expect(results).to_contain_text("✓ ticket.close ticket-7")
    expect(results).to_contain_text("✓ ticket.close ticket-9")
    expect(results).to_contain_text("✗ ticket.close ticket-8")
    expect(results).to_contain_text("superseded, not waiting for approval")
    for decided in (first, third):
        expect(page.locator(f"#action-{decided.pk}")).to_have_count(0)  # the list refreshed
    screenshot(page, "inbox-bulk-one-stale")
    decided = Action.objects.filter(pk__in=[first.pk, third.pk], status="approved")
    assert decided.count() == 2
    stale.refresh_from_db()
    assert stale.status == "superseded"
    assert not stale.approvals.exists()


def test_the_keyboard_moves_shows_the_keys_selects_and_approves(page):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=7200,
        actor="tests",
    )
    later = waiting_close(tenant, target="ticket-8")
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=600,
        actor="tests",
    )
    sooner = waiting_close(tenant, target="ticket-7")
    log_in(page, "olivia")
    first, second = page.locator(f"#action-{sooner.pk}"), page.locator(f"#action-{later.pk}")

    page.keyboard.press("j")
    expect(first).to_be_focused()
    page.keyboard.press("j")
    expect(second).to_be_focused()
    page.keyboard.press("x")
    expect(page.locator(f"#select-{later.pk}")).to_be_checked()
    page.keyboard.press("k")
    expect(first).to_be_focused()
    page.keyboard.press("?")
    expect(page.locator("#keys-dialog")).to_be_visible()
    screenshot(page, "inbox-keyboard-help")
    page.keyboard.press("Escape")
    expect(page.locator("#keys-dialog")).to_be_hidden()
    page.keyboard.press("a")

    expect(first.locator(".outcome")).to_contain_text("Approved")
    sooner.refresh_from_db()
    later.refresh_from_db()
    assert (sooner.status, later.status) == ("approved", "waiting_approval")
    screenshot(page, "inbox-keyboard-approved")


def test_an_expired_request_cannot_be_approved_and_can_be_asked_again(page):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=3,
        actor="tests",
    )
    action = waiting_close(tenant)
    log_in(page, "olivia")
    item = page.locator(f"#action-{action.pk}")
    approve = item.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_enabled()

    expect(approve).to_be_disabled(timeout=8_000)
    expect(item.locator("[data-countdown]")).to_have_text("expired")
    # Even a submission forced past the disabled button is refused by the server.
    item.locator("form[action$='/approve/']").evaluate("form => form.requestSubmit()")
    expect(item.locator(".outcome")).to_contain_text("Refused: the request has expired")
    screenshot(page, "inbox-expired-refused")
    action.refresh_from_db()
    assert action.status == "waiting_approval"
    assert not action.approvals.exists()

    assert approval_expire(action=action)
    page.reload()
    expect(page.get_by_role("heading", name="Expired, never approved")).to_be_visible()
    expect(item).to_contain_text("Expired · never approved")
    expect(item.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    screenshot(page, "inbox-expired-ask-again")
    item.get_by_role("button", name="Ask again").click()

    again = wait_until(
        lambda: Action.objects.filter(run=action.run, action_id="close-ticket~2").first()
    )
    expect(page.locator(f"#action-{again.pk} .outcome")).to_contain_text("Asked again")
    assert again.status == "waiting_approval"
    assert again.idempotency_key != action.idempotency_key


def test_a_live_refresh_keeps_the_selection_and_focus_and_shows_new_requests(page):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=600,
        actor="tests",
    )
    first = waiting_close(tenant, target="ticket-7")
    log_in(page, "olivia")
    page.keyboard.press("j")
    page.keyboard.press("x")
    expect(page.locator(f"#select-{first.pk}")).to_be_checked()

    newcomer = waiting_close(tenant, target="ticket-8")
    page.evaluate("htmx.trigger(document.body, 'inbox:refresh')")

    expect(page.locator(f"#action-{newcomer.pk}")).to_be_visible()
    expect(page.locator(f"#select-{first.pk}")).to_be_checked()
    expect(page.locator(f"#action-{first.pk}")).to_be_focused()
    expect(page.locator("[data-selected-count]")).to_have_text("1 selected")
    screenshot(page, "inbox-live-refresh-keeps-selection")


def test_the_inbox_works_without_javascript(browser, live_server):
    tenant = make_tenant()
    make_user(tenant, "operator", username="olivia")
    approved, edited = (
        waiting_close(tenant, target="ticket-7"),
        waiting_close(tenant, target="ticket-8"),
    )
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    page = context.new_page()
    try:
        log_in(page, "olivia")
        page.locator(f"#action-{approved.pk}").get_by_role(
            "button", name="Approve", exact=True
        ).click()
        expect(page.locator(".message.success")).to_contain_text("Approved")

        page.locator(f"#action-{edited.pk}").get_by_role("link", name="Edit then approve…").click()
        page.get_by_label("resolution").fill("merged into ticket-7")
        page.get_by_role("button", name="Review changes").click()
        expect(page.locator("table.diff")).to_contain_text('"merged into ticket-7"')
        page.get_by_role("button", name="Approve the edited intent").click()
        expect(page.locator(".message.success")).to_contain_text("supersedes close-ticket")
        screenshot(page, "inbox-without-javascript")
    finally:
        context.close()
    approved.refresh_from_db()
    edited.refresh_from_db()
    assert (approved.status, edited.status) == ("approved", "superseded")
    assert Action.objects.get(run=edited.run, action_id="close-ticket~2").status == "approved"
