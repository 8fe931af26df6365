from __future__ import annotations

import json

import pytest

from control.foundation.canonical import intent_digest
from sandbox.models import Effect, IdempotencyRecord, Ticket

pytestmark = [
    pytest.mark.django_db(databases=["default", "sandbox"]),
    pytest.mark.usefixtures("fresh_sandbox"),
]


def close(client, ticket_id: str, *, key: str | None, body: object = None):
    headers = {} if key is None else {"Idempotency-Key": key}
    payload = json.dumps({"args": {"resolution": "fixed"}} if body is None else body)
    return client.post(
        f"/sandbox/tickets/{ticket_id}/close",
        data=payload,
        content_type="application/json",
        headers=headers,
    )


def test_a_ticket_reads_as_its_id_status_and_version(client):
    response = client.get("/sandbox/tickets/ticket-7")

    assert response.status_code == 200
    assert response.json() == {"id": "ticket-7", "status": "open", "version": 1}


def test_an_unknown_ticket_is_not_found(client):
    response = client.get("/sandbox/tickets/ticket-101")

    assert response.status_code == 404
    assert response.json()["type"] == "not_found"


def test_closing_answers_a_receipt_digested_with_countersigns_formula(client):
    response = close(client, "ticket-3", key="run-1:close:ticket-3:v1")

    assert response.status_code == 201
    receipt = response.json()
    assert set(receipt) == {
        "idempotency_key",
        "intent_digest",
        "receipt_id",
        "target_version",
        "status",
    }
    assert receipt["idempotency_key"] == "run-1:close:ticket-3:v1"
    assert receipt["intent_digest"] == intent_digest(
        tool="ticket.close", target="ticket-3", args={"resolution": "fixed"}
    )
    assert receipt["target_version"] == 2
    assert receipt["status"] == "closed"
    ticket = Ticket.objects.get(id="ticket-3")
    assert (ticket.status, ticket.version) == ("closed", 2)
    effect = Effect.objects.get()
    assert (effect.tool, effect.target, effect.idempotency_key, effect.receipt_id) == (
        "ticket.close",
        "ticket-3",
        "run-1:close:ticket-3:v1",
        receipt["receipt_id"],
    )


def test_the_same_key_and_intent_replays_the_stored_receipt_without_a_second_effect(client):
    first = close(client, "ticket-3", key="k-1")
    second = close(client, "ticket-3", key="k-1")

    assert second.status_code == 200
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    assert Effect.objects.count() == 1
    assert Ticket.objects.get(id="ticket-3").version == 2


def test_the_same_key_with_a_different_intent_is_a_conflict_without_effect(client):
    close(client, "ticket-3", key="k-1")

    other_args = close(client, "ticket-3", key="k-1", body={"args": {"resolution": "duplicate"}})
    other_ticket = close(client, "ticket-4", key="k-1")

    for response in (other_args, other_ticket):
        assert response.status_code == 422
        assert response.json()["type"] == "idempotency_conflict"
    assert Effect.objects.count() == 1
    assert Ticket.objects.get(id="ticket-4").status == "open"


def test_closing_a_closed_ticket_under_a_new_key_is_refused_and_stores_no_key(client):
    close(client, "ticket-3", key="k-1")

    response = close(client, "ticket-3", key="k-2")

    assert response.status_code == 409
    assert response.json()["type"] == "already_closed"
    assert Effect.objects.count() == 1
    assert not IdempotencyRecord.objects.filter(key="k-2").exists()
    assert client.get("/sandbox/receipts/k-2").status_code == 404


def test_closing_an_unknown_ticket_is_not_found_and_stores_no_key(client):
    response = close(client, "ticket-404", key="k-1")

    assert response.status_code == 404
    assert not IdempotencyRecord.objects.exists()
    assert not Effect.objects.exists()


def test_a_close_without_an_idempotency_key_is_refused(client):
    response = close(client, "ticket-3", key=None)

    assert response.status_code == 400
    assert response.json()["type"] == "missing_idempotency_key"
    assert Ticket.objects.get(id="ticket-3").status == "open"


def test_an_empty_close_body_means_no_arguments(client):
    response = client.post(
        "/sandbox/tickets/ticket-3/close",
        data=b"",
        content_type="application/json",
        headers={"Idempotency-Key": "k-1"},
    )

    assert response.status_code == 201
    assert response.json()["intent_digest"] == intent_digest(
        tool="ticket.close", target="ticket-3", args={}
    )


@pytest.mark.parametrize(
    "payload",
    [
        "[]",
        '{"args": []}',
        '{"args": {"resolution": 7}}',
        '{"args": {"resolution": ""}}',
        '{"args": {"reason": "fixed"}}',
        '{"args": {}, "extra": 1}',
        '{"args": {"resolution": "a", "resolution": "b"}}',
        '{"args": {"resolution": NaN}}',
        "not json",
    ],
)
def test_a_malformed_close_body_is_refused_before_anything_happens(client, payload):
    response = client.post(
        "/sandbox/tickets/ticket-3/close",
        data=payload,
        content_type="application/json",
        headers={"Idempotency-Key": "k-1"},
    )

    assert response.status_code == 400
    assert {"type", "detail"} <= set(response.json())
    assert not IdempotencyRecord.objects.exists()
    assert Ticket.objects.get(id="ticket-3").status == "open"


def test_a_receipt_can_be_queried_by_its_key(client):
    receipt = close(client, "ticket-3", key="run-9:close/3:ticket-3:v1").json()

    response = client.get("/sandbox/receipts/run-9:close/3:ticket-3:v1")

    assert response.status_code == 200
    assert response.json() == receipt
    assert client.get("/sandbox/receipts/never-used").status_code == 404


def test_an_unsupported_method_answers_405_in_json(client):
    response = client.delete("/sandbox/tickets/ticket-3")

    assert response.status_code == 405
    assert response.json()["type"] == "method_not_allowed"
    assert response["Allow"] == "GET"
