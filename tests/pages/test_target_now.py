"""A card's "Read it now": the target as its system has it, beside what the write will do,
and a plain word when the goal already holds. Against the sandbox over real HTTP."""

from __future__ import annotations

import pytest
import requests
from django.urls import reverse

from tests.factories import make_action, make_run
from tests.pages.conftest import HTMX

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def read_now(client, action):
    return client.get(reverse("inbox_target_now", args=[action.pk]), **HTMX)


def test_an_open_ticket_is_shown_as_it_is_and_a_closed_one_says_the_goal_holds(
    operator_client, tenant, sandbox
):
    action = make_action(make_run(tenant), target="ticket-7")
    inbox = operator_client.get(reverse("inbox")).content.decode()
    assert "Read ticket-7 as it is now" in inbox

    now = read_now(operator_client, action)
    assert now.status_code == 200
    page = now.content.decode()
    assert "&quot;status&quot;: &quot;open&quot;" in page
    assert "data-goal-holds" not in page

    closed = requests.post(
        f"{sandbox}tickets/ticket-7/close",
        json={"args": {}},
        headers={"Idempotency-Key": "closed-by-someone-else"},
        timeout=5,
    )
    closed.raise_for_status()  # someone closed it meanwhile, outside Countersign
    page = read_now(operator_client, action).content.decode()
    assert "&quot;status&quot;: &quot;closed&quot;" in page
    assert "ticket-7</code> already is what this write would make it" in page


def test_a_tool_without_a_read_offers_none(operator_client, tenant):
    action = make_action(
        make_run(tenant),
        tool="payment.charge",
        target="cus_42",
        args={"amount_cents": 100, "currency": "EUR"},
    )
    inbox = operator_client.get(reverse("inbox")).content.decode()
    assert "Read cus_42 as it is now" not in inbox
    assert "offers no read of its target" in read_now(operator_client, action).content.decode()


def test_a_system_that_does_not_answer_is_said_so_and_nothing_changes(
    operator_client, tenant, settings
):
    settings.SANDBOX_URL = "http://127.0.0.1:9/sandbox/"
    action = make_action(make_run(tenant), target="ticket-9")
    page = read_now(operator_client, action).content.decode()
    assert "Could not read <code>ticket-9</code>" in page
    action.refresh_from_db()
    assert action.status == "waiting_approval"


def test_another_tenants_request_is_not_found(operator_client, other_tenant):
    action = make_action(make_run(other_tenant))
    assert read_now(operator_client, action).status_code == 404
