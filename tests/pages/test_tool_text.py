"""Next to each intent, the inbox and the run page say which connector its tool belongs to and
what the tool declares, in words; a tool this server no longer configures says so."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from tests.pages.conftest import make_waiting

pytestmark = pytest.mark.django_db

CLOSE = "ticket · http — dedupes by key, can be queried by key"
NOTIFY = "notify · http — a resend is a second effect, cannot be queried"
CHARGE = "payment · http — dedupes by key, can be queried by key, undone by payment.refund"
GONE = "tool not configured on this server"


def page_text(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def make_notification(tenant):
    return make_waiting(
        tenant,
        tool="notify.send",
        action_id="notify",
        target="ana@example.com",
        args={"body": "Your refund is on its way."},
    )


def make_charge(tenant):
    return make_waiting(
        tenant,
        tool="payment.charge",
        action_id="charge",
        target="cus_42",
        args={"amount_cents": 1250, "currency": "EUR"},
    )


def test_each_inbox_item_says_its_connector_and_what_its_tool_declares(operator_client, tenant):
    make_waiting(tenant)
    make_notification(tenant)
    make_charge(tenant)

    page = page_text(operator_client, reverse("inbox"))

    assert page.count(CLOSE) == 1
    assert page.count(NOTIFY) == 1
    assert page.count(CHARGE) == 1
    assert GONE not in page


def test_each_write_on_the_run_page_says_its_connector_and_what_its_tool_declares(
    operator_client, tenant
):
    notification = make_notification(tenant)

    page = page_text(operator_client, reverse("run_detail", args=[notification.run_id]))

    assert NOTIFY in page


def test_a_tool_no_longer_configured_is_said_so_instead_of_failing(
    operator_client, tenant, settings
):
    close = make_waiting(tenant)
    # Switching the sandbox off takes its tools out of the registry, as a connector file
    # removed from COUNTERSIGN_CONNECTORS would.
    settings.SANDBOX_ENABLED = False

    inbox = page_text(operator_client, reverse("inbox"))
    run = page_text(operator_client, reverse("run_detail", args=[close.run_id]))

    for page in (inbox, run):
        assert GONE in page
        assert CLOSE not in page
        assert "ticket.close" in page
