from __future__ import annotations

import pytest

from control.foundation.canonical import intent_digest
from sandbox.models import Charge, Effect, Refund

pytestmark = [
    pytest.mark.django_db(databases=["default", "sandbox"]),
    pytest.mark.usefixtures("fresh_sandbox"),
]


def charge(client, *, key: str, customer: str = "cus_42", amount: object = 5000, currency="EUR"):
    return client.post(
        "/sandbox/payments/charges",
        data={"customer": customer, "amount_cents": amount, "currency": currency},
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )


def refund(client, *, key: str, charge_id: str, amount: object):
    return client.post(
        "/sandbox/payments/refunds",
        data={"charge": charge_id, "amount_cents": amount},
        content_type="application/json",
        headers={"Idempotency-Key": key},
    )


def test_a_charge_answers_a_receipt_and_replays_it_for_the_same_key(client):
    first = charge(client, key="c-1")
    again = charge(client, key="c-1")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    receipt = first.json()
    assert receipt["status"] == "charged"
    assert receipt["receipt_id"].startswith("ch_")
    assert receipt["intent_digest"] == intent_digest(
        tool="payment.charge", target="cus_42", args={"amount_cents": 5000, "currency": "EUR"}
    )
    assert Charge.objects.count() == 1
    assert Effect.objects.filter(tool="payment.charge", idempotency_key="c-1").count() == 1


def test_a_charge_key_reused_for_another_amount_is_a_conflict(client):
    charge(client, key="c-1")

    response = charge(client, key="c-1", amount=5001)

    assert response.status_code == 422
    assert response.json()["type"] == "idempotency_conflict"
    assert Charge.objects.count() == 1


def test_refunds_may_add_up_to_the_charge_and_not_beyond(client):
    charge_id = charge(client, key="c-1").json()["receipt_id"]

    partial = refund(client, key="r-1", charge_id=charge_id, amount=3000)
    rest = refund(client, key="r-2", charge_id=charge_id, amount=2000)
    beyond = refund(client, key="r-3", charge_id=charge_id, amount=1)

    assert (partial.status_code, rest.status_code) == (201, 201)
    assert partial.json()["status"] == "refunded"
    assert (partial.json()["target_version"], rest.json()["target_version"]) == (2, 3)
    assert partial.json()["intent_digest"] == intent_digest(
        tool="payment.refund", target=charge_id, args={"amount_cents": 3000}
    )
    assert beyond.status_code == 409
    assert beyond.json()["type"] == "refund_exceeds_charge"
    assert Refund.objects.count() == 2
    assert Charge.objects.get().refunded_cents == 5000
    assert client.get(f"/sandbox/payments/charges/{charge_id}").json() == {
        "id": charge_id,
        "customer": "cus_42",
        "amount_cents": 5000,
        "currency": "EUR",
        "refunded_cents": 5000,
        "version": 3,
    }


def test_a_refund_larger_than_the_charge_is_refused_without_effect(client):
    charge_id = charge(client, key="c-1").json()["receipt_id"]

    response = refund(client, key="r-1", charge_id=charge_id, amount=5001)

    assert response.status_code == 409
    assert not Refund.objects.exists()
    assert not Effect.objects.filter(tool="payment.refund").exists()


def test_a_refund_of_an_unknown_charge_is_refused(client):
    response = refund(client, key="r-1", charge_id="ch_" + "0" * 32, amount=1)

    assert response.status_code == 409
    assert response.json()["type"] == "charge_not_found"


def test_a_refund_replays_for_its_key_even_once_the_charge_is_fully_refunded(client):
    charge_id = charge(client, key="c-1").json()["receipt_id"]
    first = refund(client, key="r-1", charge_id=charge_id, amount=5000)

    again = refund(client, key="r-1", charge_id=charge_id, amount=5000)

    assert again.status_code == 200
    assert again.json() == first.json()
    assert Refund.objects.count() == 1


@pytest.mark.parametrize(
    ("amount", "currency", "customer"),
    [
        (0, "EUR", "cus_42"),
        (-5, "EUR", "cus_42"),
        (True, "EUR", "cus_42"),
        (12.5, "EUR", "cus_42"),
        ("500", "EUR", "cus_42"),
        (100_000_001, "EUR", "cus_42"),
        (500, "eur", "cus_42"),
        (500, "EURO", "cus_42"),
        (500, "EUR", "cus 42"),
    ],
)
def test_a_malformed_charge_is_refused_before_anything_happens(client, amount, currency, customer):
    response = charge(client, key="c-1", amount=amount, currency=currency, customer=customer)

    assert response.status_code == 400
    assert not Charge.objects.exists()


def test_payments_require_an_idempotency_key(client):
    response = client.post(
        "/sandbox/payments/charges",
        data={"customer": "cus_42", "amount_cents": 5, "currency": "EUR"},
        content_type="application/json",
    )

    assert response.status_code == 400
    assert response.json()["type"] == "missing_idempotency_key"
