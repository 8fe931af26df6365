from __future__ import annotations

import pytest

from control.foundation.canonical import intent_digest
from sandbox.models import Effect, Notification

pytestmark = [
    pytest.mark.django_db(databases=["default", "sandbox"]),
    pytest.mark.usefixtures("fresh_sandbox"),
]


def send(client, recipient: str, body: str, **headers: str):
    return client.post(
        "/sandbox/notifications",
        data={"recipient": recipient, "body": body},
        content_type="application/json",
        headers=headers,
    )


def test_two_identical_sends_deliver_two_notifications(client):
    first = send(client, "ops@example.com", "deploy done")
    # A key changes nothing: the notifier has no idempotency support.
    second = send(client, "ops@example.com", "deploy done", **{"Idempotency-Key": "k-1"})

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["receipt_id"] != second.json()["receipt_id"]
    assert Notification.objects.count() == 2
    assert Effect.objects.filter(tool="notify.send", target="ops@example.com").count() == 2


def test_a_send_answers_a_receipt_without_key(client):
    receipt = send(client, "ops@example.com", "deploy done").json()

    assert receipt["idempotency_key"] is None
    assert receipt["status"] == "sent"
    assert receipt["target_version"] is None
    assert receipt["intent_digest"] == intent_digest(
        tool="notify.send", target="ops@example.com", args={"body": "deploy done"}
    )


def test_the_notifier_lists_what_it_sent_to_a_recipient(client):
    send(client, "ops@example.com", "one")
    send(client, "dev@example.com", "other")
    send(client, "ops@example.com", "two")

    listing = client.get("/sandbox/notifications", {"recipient": "ops@example.com"}).json()

    assert [item["body"] for item in listing["notifications"]] == ["one", "two"]
    assert {item["recipient"] for item in listing["notifications"]} == {"ops@example.com"}
    assert len(client.get("/sandbox/notifications").json()["notifications"]) == 3


@pytest.mark.parametrize(
    "payload",
    [
        {"recipient": "ops@example.com"},
        {"recipient": "", "body": "x"},
        {"recipient": "ops@example.com", "body": 5},
        {"recipient": "ops@example.com", "body": "x", "cc": "dev@example.com"},
        {"recipient": "ops@example.com", "body": "x" * 2001},
    ],
)
def test_a_malformed_notification_is_refused_and_not_sent(client, payload):
    response = client.post("/sandbox/notifications", data=payload, content_type="application/json")

    assert response.status_code == 400
    assert not Notification.objects.exists()
