"""Deciding from the mail: a real RQ worker process sends the "approval requested" mail to a
real SMTP server (aiosmtpd); Chromium follows the link taken from the received message,
sees the frozen intent, signs in (or not, where the tool allows link-only decisions) and
confirms; the action is approved and a worker executes it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from runs.models import Action, ToolPolicy
from runs.services import tool_policy_set
from sandbox.models import Effect
from tests.browser.conftest import PASSWORD, log_in, screenshot
from tests.factories import (
    make_action,
    make_notify_plan,
    make_observation,
    make_run,
    make_tenant,
    make_user,
)
from tests.processes import Workers
from tests.smtp import Mailbox, smtp_server

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
LINK = re.compile(r"^https?://\S+/decide/\S+/$", re.MULTILINE)


class MailingWorkers(Workers):
    """Worker processes that mail through the test's SMTP server, with links to the live
    server."""

    def __init__(self, sandbox_url: str, *, smtp_port: int, base_url: str) -> None:
        super().__init__(sandbox_url)
        self.mail_env = {
            "COUNTERSIGN_EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "COUNTERSIGN_EMAIL_HOST": "127.0.0.1",
            "COUNTERSIGN_EMAIL_PORT": str(smtp_port),
            "COUNTERSIGN_BASE_URL": base_url,
        }

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(**self.mail_env, **extra)


@pytest.fixture
def mailbox():
    return Mailbox()


@pytest.fixture
def mailing_workers(sandbox, redis_queue, live_server, mailbox):
    with smtp_server(mailbox) as port:
        pool = MailingWorkers(sandbox, smtp_port=port, base_url=live_server.url)
        yield pool
        pool.stop_all()
        pool.assert_no_failed_jobs()


def waiting_close(tenant) -> Action:
    run = make_run(tenant, goal="close ticket-7 once the customer confirms the fix")
    observation = make_observation(run, summary="customer wrote on ticket-7: works now")
    return make_action(run, args={"resolution": "fixed"}, observation=observation)


def operator_with_mail(tenant, username: str):
    user = make_user(tenant, "operator", username=username)
    user.email = f"{username}@example.com"
    user.save(update_fields=["email"])
    return user


def received_link(mailbox: Mailbox, address: str) -> str:
    (message,) = [m for m in mailbox.messages if m["To"] == address]
    assert message["Subject"] == "Approval requested: ticket.close ticket-7"
    return LINK.search(message.get_content()).group(0)


def test_an_approver_follows_the_mailed_link_signs_in_and_approves(page, mailing_workers, mailbox):
    tenant = make_tenant()
    operator_with_mail(tenant, "olivia")
    operator_with_mail(tenant, "oscar")
    action = waiting_close(tenant)

    assert mailing_workers.run_burst() == 0  # the worker sends the "requested" mails
    assert sorted(m["To"] for m in mailbox.messages) == ["olivia@example.com", "oscar@example.com"]
    link = received_link(mailbox, "olivia@example.com")

    page.goto(link)
    item = page.locator("[data-decision-link]")
    expect(item).to_contain_text("customer wrote on ticket-7: works now")
    expect(page.locator("[data-digest]")).to_have_text(action.intent_digest)
    expect(page.locator("[data-run-goal]")).to_have_text(
        "close ticket-7 once the customer confirms the fix"
    )
    screenshot(page, "decision-link-before-sign-in")
    action.refresh_from_db()
    assert action.status == "waiting_approval"  # opening the link decided nothing

    page.locator("[data-sign-in]").click()
    page.get_by_label("Username").fill("olivia")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(link)
    page.get_by_role("button", name="Confirm: approve this write").click()

    expect(page.locator(".outcome.ok")).to_contain_text("Approved. Queued for a worker.")
    expect(item).to_contain_text("1 of 1")
    screenshot(page, "decision-link-approved")
    action.refresh_from_db()
    assert action.status == "approved"
    assert action.approvals.get().approver.username == "olivia"

    assert mailing_workers.run_burst() == 0  # and a worker executes exactly that intent
    action.refresh_from_db()
    assert action.status == "succeeded"

    page.goto(link)
    expect(page.locator("[data-link-refused]")).to_contain_text("This link was already used")
    screenshot(page, "decision-link-used")


def test_a_link_only_tool_is_approved_from_the_link_without_signing_in(
    page, mailing_workers, mailbox
):
    tenant = make_tenant()
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=3600,
        link_only_decisions=True,
        actor="tests",
    )
    operator_with_mail(tenant, "olivia")
    action = waiting_close(tenant)
    assert mailing_workers.run_burst() == 0

    page.goto(received_link(mailbox, "olivia@example.com"))
    expect(page.locator("[data-sign-in]")).to_have_count(0)
    screenshot(page, "decision-link-link-only")
    page.get_by_role("button", name="Confirm: approve this write").click()

    expect(page.locator(".outcome.ok")).to_contain_text("Approved")
    action.refresh_from_db()
    assert action.status == "approved"
    assert action.link_uses.get().logged_in is False


def test_an_admin_sets_an_escalation_on_the_policies_page(page):
    tenant = make_tenant()
    make_user(tenant, "admin", username="ada")
    log_in(page, "ada")
    page.get_by_role("link", name="Policies").click()
    row = page.locator("#policy-ticket-close")

    row.get_by_label("ticket.close: escalate after minutes").fill("30")
    row.get_by_label("ticket.close: escalation contacts").fill("lead@example.com, duty@")
    row.get_by_role("button", name="Save").click()

    expect(page.locator(".row-errors")).to_contain_text(
        "Escalation contacts: “duty@” is not an email address."
    )
    screenshot(page, "tool-policies-escalation-refused")
    assert not ToolPolicy.objects.filter(tenant=tenant).exists()

    row = page.locator("#policy-ticket-close")
    row.get_by_label("ticket.close: escalation contacts").fill("lead@example.com, duty@example.com")
    row.get_by_label("ticket.close: decide from the mail link without signing in").check()
    row.get_by_role("button", name="Save").click()

    expect(page.locator(".message.success")).to_contain_text("Saved the policy for ticket.close")
    screenshot(page, "tool-policies-escalation")
    policy = ToolPolicy.objects.get(tenant=tenant, tool="ticket.close")
    assert (policy.escalation_seconds, policy.escalation_contacts, policy.link_only_decisions) == (
        1800,
        ["lead@example.com", "duty@example.com"],
        True,
    )


def test_a_plan_is_approved_whole_from_its_mailed_link(page, mailing_workers, mailbox):
    tenant = make_tenant()
    operator_with_mail(tenant, "olivia")
    plan = make_notify_plan(
        tenant,
        goal="tell three customers their order shipped",
        bodies={f"customer-{n}@example.com": "your order shipped" for n in range(1, 4)},
    )
    assert mailing_workers.run_burst() == 0

    (message,) = mailbox.messages
    assert message["Subject"] == "Approval requested: plan of 3: notify.send"
    page.goto(LINK.search(message.get_content()).group(0))
    expect(page.locator("[data-plan-items] tbody tr")).to_have_count(3)
    expect(page.locator("[data-digest]")).to_have_text(plan.digest)
    page.locator("[data-sign-in]").click()
    page.get_by_label("Username").fill("olivia")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("button", name="Confirm: approve all 3").click()

    expect(page.locator(".outcome.ok")).to_contain_text("Approved all 3.")
    screenshot(page, "decision-link-plan-approved")
    assert mailing_workers.run_burst() == 0  # a worker sends each, in order, under its key
    statuses = list(plan.items.order_by("position").values_list("status", flat=True))
    assert statuses == ["succeeded"] * 3
    assert sorted(Effect.objects.values_list("target", flat=True)) == [
        f"customer-{n}@example.com" for n in range(1, 4)
    ]
