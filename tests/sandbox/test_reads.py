from __future__ import annotations

import pytest
from django.db import connections

from sandbox.services import notification_send, ticket_close

pytestmark = [
    pytest.mark.django_db(databases=["default", "sandbox"]),
    pytest.mark.usefixtures("fresh_sandbox"),
]


def test_the_effects_ledger_is_one_query_however_long(client, django_assert_num_queries):
    for number in range(1, 31):
        ticket_close(ticket_id=f"ticket-{number}", idempotency_key=f"k-{number}", args={})

    with django_assert_num_queries(1, connection=connections["sandbox"]):
        ledger = client.get("/sandbox/effects").json()["effects"]

    assert len(ledger) == 30
    assert ledger[0] == {
        "tool": "ticket.close",
        "target": "ticket-1",
        "idempotency_key": "k-1",
        "receipt_id": ledger[0]["receipt_id"],
        "created_at": ledger[0]["created_at"],
    }


def test_the_effects_ledger_filters_by_tool_and_key(client):
    ticket_close(ticket_id="ticket-1", idempotency_key="k-1", args={})
    ticket_close(ticket_id="ticket-2", idempotency_key="k-2", args={})
    notification_send(recipient="ops@example.com", body="hi")

    by_tool = client.get("/sandbox/effects", {"tool": "notify.send"}).json()["effects"]
    by_key = client.get("/sandbox/effects", {"key": "k-2"}).json()["effects"]

    assert [(effect["tool"], effect["idempotency_key"]) for effect in by_tool] == [
        ("notify.send", None)
    ]
    assert [effect["target"] for effect in by_key] == ["ticket-2"]


def test_the_notification_list_is_one_query_however_long(client, django_assert_num_queries):
    for number in range(30):
        notification_send(recipient="ops@example.com", body=f"message {number}")

    with django_assert_num_queries(1, connection=connections["sandbox"]):
        sent = client.get("/sandbox/notifications", {"recipient": "ops@example.com"}).json()

    assert len(sent["notifications"]) == 30
