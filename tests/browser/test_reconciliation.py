"""The reconciliation queue and cases in a real browser: each kind of resolution, a refused
receipt, "probe now" and four eyes, against the live server and the sandbox over HTTP, with
real RQ workers where a resend must actually happen (and happen once)."""

from __future__ import annotations

import pytest
import requests
from django.urls import reverse
from playwright.sync_api import expect

from reconciliation.models import ReconciliationCase
from runs.models import Action
from sandbox.models import Effect
from tests.browser.conftest import PASSWORD, screenshot
from tests.factories import make_policy, make_tenant, make_user
from tests.reconciliation.test_cases import approved, make_uncertain, probe_until_settled
from tests.reconciliation.test_views import OTHER_DIGEST, UNREACHABLE_SANDBOX

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "sandbox"]),
]

QUEUE = "/reconciliation/"
LOST_BODY = "Your refund of 12.00 EUR is on its way."


def log_in_to(page, username: str, path: str) -> None:
    """Logs in and lands on `path` (a reconciler's login would otherwise land on the inbox)."""
    page.goto(f"{reverse('login')}?next={path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**{path}")


def log_out(page) -> None:
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/accounts/**")


def lost_notification(tenant, *, recipient: str = "ana@example.com") -> Action:
    """A notification whose answer never came back (the notifier cannot be queried by key)."""
    action = approved(
        tenant,
        tool="notify.send",
        target=recipient,
        args={"body": LOST_BODY},
    )
    make_uncertain(action)
    return action


def notify(sandbox: str, recipient: str, body: str) -> dict:
    answer = requests.post(
        f"{sandbox}notifications", timeout=5, json={"recipient": recipient, "body": body}
    )
    answer.raise_for_status()
    return answer.json()


def deliver_as_the_lost_request_did(sandbox: str, action: Action) -> dict:
    return notify(sandbox, action.target, action.args["body"])


def settled(action: Action) -> ReconciliationCase:
    case = probe_until_settled(action.cases.get())
    assert case.status == "open"
    return case


def case_url(case: ReconciliationCase) -> str:
    return reverse("case_detail", args=[case.pk])


def test_a_reconciler_probes_then_resolves_a_delivered_notification_as_applied(page, sandbox):
    tenant = make_tenant()
    make_user(tenant, "reconciler", username="rita")
    notify(sandbox, "ana@example.com", LOST_BODY)  # the same message, sent before: not it
    action = lost_notification(tenant)
    receipt = deliver_as_the_lost_request_did(sandbox, action)
    case = settled(action)
    still_probed = make_uncertain(approved(tenant, target="ticket-31"))
    log_in_to(page, "rita", QUEUE)

    row = page.locator(f"#case-{case.pk}")
    expect(row).to_contain_text("notify.send → ana@example.com")
    expect(row).to_contain_text("dropped connection")
    expect(page.locator(".cases-probing")).to_contain_text("ticket.close → ticket-31")
    expect(page.locator(f".cases #case-{still_probed.pk}")).to_have_count(0)
    screenshot(page, "reconciliation-queue")
    row.get_by_role("link", name="notify.send → ana@example.com").click()
    page.wait_for_url(f"**{case_url(case)}")
    expect(page.locator("[data-target-state]")).to_contain_text(receipt["receipt_id"])

    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "reconciliation-case-on-a-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.get_by_role("button", name="Probe now").click()
    expect(page.locator("[data-outcome]")).to_contain_text("Probed: nothing proven")
    expect(page.locator(".findings > li")).to_have_count(4)
    page.get_by_text("Applied: it took effect…").click()
    panel = page.locator("#resolve-applied")
    # The notifier lists what it sent with ids and times but no digest: the reconciler
    # points at the record, and no field asks for a digest.
    record = panel.locator("[data-candidate]")
    expect(record).to_have_count(1)
    expect(record).to_contain_text(receipt["receipt_id"])
    expect(record).to_contain_text("after the first attempt started · the same target, body")
    expect(panel.locator("[data-earlier-records]")).to_contain_text(
        "1 other record with the same values was created before the first attempt started"
    )
    record.get_by_role("radio").check()
    panel.get_by_label("Why (kept in the audit log)").fill("the notifier lists it, sent 10:02")
    screenshot(page, "reconciliation-case-applied-evidence")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshot(page, "reconciliation-case-applied-evidence-on-a-phone")
    page.set_viewport_size({"width": 1280, "height": 900})
    panel.get_by_role("button", name="Resolve as applied").click()

    expect(page.locator("[data-outcome]")).to_contain_text("Resolved as applied")
    expect(page.locator("#resolution-title")).to_have_text("Resolved: applied")
    expect(page.locator("#resolution")).to_contain_text(receipt["receipt_id"])
    screenshot(page, "reconciliation-case-resolved-applied")
    page.goto(reverse("run_detail", args=[action.run_id]))
    expect(page.locator("[data-receipt]")).to_contain_text(receipt["receipt_id"])
    expect(page.locator("[data-receipt]")).to_contain_text("a reconciler's evidence")
    action.refresh_from_db()
    assert (action.status, action.receipt.source, action.receipt.receipt_id) == (
        "succeeded",
        "reconciler",
        receipt["receipt_id"],
    )


def test_a_receipt_whose_digest_differs_is_refused_in_the_browser(page, sandbox):
    tenant = make_tenant()
    make_user(tenant, "reconciler", username="rita")
    action = lost_notification(tenant)
    case = settled(action)
    log_in_to(page, "rita", case_url(case))

    page.get_by_text("Applied: it took effect…").click()
    panel = page.locator("#resolve-applied")
    panel.get_by_label("Receipt id").fill("ntf_someone_elses")
    panel.get_by_label("The intent digest it carries (optional)").fill(OTHER_DIGEST)
    panel.get_by_label("Why (kept in the audit log)").fill("found a receipt")
    panel.get_by_role("button", name="Resolve as applied").click()

    outcome = page.locator("[data-outcome]")
    expect(outcome).to_contain_text("it proves another write")
    expect(outcome).to_contain_text("Nothing was resolved")
    expect(page.locator("#resolve-applied")).to_have_attribute("open", "")
    expect(page.locator("#resolve-applied").get_by_label("Receipt id")).to_have_value(
        "ntf_someone_elses"
    )
    screenshot(page, "reconciliation-case-digest-refused")
    case.refresh_from_db()
    action.refresh_from_db()
    assert (case.status, action.status) == ("open", "uncertain")


def test_not_applied_needs_the_resend_confirmed_and_then_sends_it_once(page, workers):
    tenant = make_tenant()
    make_user(tenant, "reconciler", username="rita")
    action = lost_notification(tenant, recipient="bo@example.com")
    case = settled(action)
    log_in_to(page, "rita", case_url(case))

    page.get_by_text("Not applied: send it again…").click()
    panel = page.locator("#resolve-not-applied")
    panel.get_by_label("Why (kept in the audit log)").fill("the notifier lists nothing for bo")
    panel.get_by_role("button", name="Resolve as not applied").click()
    expect(page.locator("[data-outcome]")).to_contain_text(
        "confirm that sending it again is intended"
    )
    panel = page.locator("#resolve-not-applied")
    panel.get_by_label(
        "I checked that it did not take effect: sending it again is intended"
    ).check()
    screenshot(page, "reconciliation-case-resend-confirm")
    panel.get_by_role("button", name="Resolve as not applied").click()

    expect(page.locator("[data-outcome]")).to_contain_text("Resolved as not applied")
    assert workers.run_burst() == 0, workers.last_output
    page.reload()
    expect(page.locator("#resolution")).to_contain_text("Succeeded")
    screenshot(page, "reconciliation-case-resent")
    assert Effect.objects.filter(tool="notify.send", target="bo@example.com").count() == 1


def test_compensate_proposes_a_refund_that_appears_in_the_inbox(page, sandbox, settings):
    tenant = make_tenant()
    make_user(tenant, "reconciler", "operator", username="rita")
    action = approved(
        tenant,
        tool="payment.charge",
        target="cus_9",
        action_id="charge",
        args={"amount_cents": 1200, "currency": "EUR"},
    )
    case = make_uncertain(action)
    charge = requests.post(
        f"{sandbox}payments/charges",
        timeout=5,
        headers={"Idempotency-Key": action.idempotency_key},
        json={"customer": "cus_9", "amount_cents": 1200, "currency": "EUR"},
    ).json()
    settings.SANDBOX_URL = UNREACHABLE_SANDBOX  # the provider was down while Countersign probed
    case = settled(action)
    settings.SANDBOX_URL = sandbox
    log_in_to(page, "rita", case_url(case))

    page.get_by_text("Compensate: undo it…").click()
    panel = page.locator("#resolve-compensate")
    panel.get_by_label("Receipt id").fill(charge["receipt_id"])
    panel.get_by_label("The intent digest it carries (optional)").fill(charge["intent_digest"])
    panel.get_by_label("Why (kept in the audit log)").fill("the customer cancelled the order")
    panel.get_by_role("button", name="Record it and propose payment.refund").click()

    outcome = page.locator("[data-outcome]")
    expect(outcome).to_contain_text("Compensation proposed")
    expect(page.locator("[data-compensation]")).to_contain_text("Waiting Approval")
    screenshot(page, "reconciliation-case-compensated")
    outcome.get_by_role("link", name="Open it in the inbox").click()
    undo = Action.objects.get(run=action.run, action_id="undo-charge")
    item = page.locator(f"#action-{undo.pk}")
    expect(item).to_contain_text("payment.refund")
    expect(item).to_contain_text(charge["receipt_id"])
    screenshot(page, "reconciliation-refund-in-the-inbox")
    assert (undo.tool, undo.status) == ("payment.refund", "waiting_approval")


def test_abandon_stops_the_run_and_the_run_page_shows_it_failed(page, sandbox):
    tenant = make_tenant()
    make_user(tenant, "reconciler", username="rita")
    action = lost_notification(tenant)
    case = settled(action)
    log_in_to(page, "rita", case_url(case))

    page.get_by_text("Abandon: stop the run…").click()
    panel = page.locator("#resolve-abandon")
    panel.get_by_label("Reason (the run's stop reason, kept in the audit log)").fill(
        "the customer asked us to stop writing to them"
    )
    panel.get_by_role("button", name="Abandon and stop the run").click()

    outcome = page.locator("[data-outcome]")
    expect(outcome).to_contain_text("Abandoned")
    screenshot(page, "reconciliation-case-abandoned")
    outcome.get_by_role("link", name="See the run").click()
    expect(page.locator(".summary")).to_contain_text("Failed")
    expect(page.locator("#stop-title")).to_have_text("Stopped: failed")
    expect(page.locator(".stop")).to_contain_text("the customer asked us to stop writing to them")
    screenshot(page, "reconciliation-run-failed")


def test_with_four_eyes_another_reconciler_confirms_the_proposal(page, sandbox):
    tenant = make_tenant()
    make_policy(tenant, "notify.send", four_eyes=True)
    make_user(tenant, "reconciler", username="rita")
    make_user(tenant, "reconciler", username="remy")
    action = lost_notification(tenant)
    case = settled(action)
    log_in_to(page, "rita", case_url(case))
    page.get_by_text("Abandon: stop the run…").click()
    page.locator("#resolve-abandon").get_by_role("textbox").fill("a duplicate of another run")
    page.get_by_role("button", name="Abandon and stop the run").click()
    expect(page.locator("[data-outcome]")).to_contain_text("waiting for a second reconciler")
    expect(page.locator("[data-proposal]")).to_have_text(
        "Awaiting a second reconciler: rita proposed abandon."
    )
    log_out(page)

    log_in_to(page, "remy", QUEUE)
    expect(page.locator(f"#case-{case.pk}")).to_contain_text("rita proposed abandon")
    screenshot(page, "reconciliation-queue-awaiting-confirmation")
    page.goto(case_url(case))
    form = page.locator("[data-confirm-form]")
    form.get_by_label("Why you agree (kept in the audit log)").fill("agreed: same order as run 12")
    screenshot(page, "reconciliation-case-four-eyes")
    form.get_by_role("button", name="Confirm: abandon").click()

    expect(page.locator("#resolution-title")).to_have_text("Resolved: abandon")
    expect(page.locator("#resolution")).to_contain_text("proposed by rita (four eyes)")
    case.refresh_from_db()
    assert (case.proposed_by.username, case.resolved_by.username) == ("rita", "remy")
