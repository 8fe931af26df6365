"""docs/CONNECTORS.md's Stripe recipe, exactly as printed but for STRIPE_URL, against the
sandbox's Stripe-shaped routes (form bodies, Idempotency-Key, metadata, the search API),
with real worker processes: a charge is made once with the approved amount; when the
connection drops after the charge was made, the search by key finds it and its receipt is
recorded, never a second charge; and `connectors test` passes every check it can run."""

from __future__ import annotations

import contextlib

import pytest
import requests
from django.core.management import call_command

from runs.models import Action
from sandbox.models import Charge
from tests.connector_docs import EXAMPLES, connector_of, load
from tests.factories import approved_action
from tests.processes import settled
from tests.registry import registered

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

[RECIPE] = [text for text in EXAMPLES if connector_of(text) == "payments"]


@pytest.fixture
def stripe_charge(sandbox, tmp_path, monkeypatch):
    """payments.charge of the recipe, in this process and in the workers it starts."""
    monkeypatch.setenv("STRIPE_URL", sandbox + "stripe/")
    monkeypatch.setenv("STRIPE_SECRET_KEY", "sk_test_countersign")
    tools = load(RECIPE, tmp_path, STRIPE_URL=sandbox + "stripe/")
    monkeypatch.setenv("COUNTERSIGN_CONNECTORS", str(tmp_path / "example.toml"))
    with contextlib.ExitStack() as stack:
        for tool in tools.values():
            stack.enter_context(registered(tool))
        yield tools[("payments.charge", "v1")]


def approved_charge(tool) -> Action:
    return approved_action(
        tool.name,
        target="cus_42",
        args={"amount": 1250, "currency": "eur"},
        action_id="charge-order-7",
        goal="charge cus_42 for order 7",
    )


def fault(sandbox: str, kind: str) -> None:
    requests.post(
        sandbox + "faults", json={"tool": "payment.charge", "fault": kind, "count": 1}, timeout=5
    ).raise_for_status()


def test_an_approved_charge_is_made_once_and_its_receipt_proves_the_digest(
    workers, sandbox, stripe_charge
):
    action = settled(workers, approved_charge(stripe_charge))

    assert action.status == "succeeded", (action.error_class, action.last_error)
    [charge] = Charge.objects.using("sandbox").all()
    assert (charge.customer, charge.amount_cents, charge.currency) == ("cus_42", 1250, "EUR")
    assert charge.metadata == {
        "countersign_key": action.idempotency_key,
        "countersign_digest": action.intent_digest,
    }
    receipt = action.receipt
    assert (receipt.receipt_id, receipt.source) == (charge.receipt_id, "response")
    assert (receipt.idempotency_key, receipt.intent_digest) == (
        action.idempotency_key,
        action.intent_digest,
    )


def test_a_charge_whose_answer_was_lost_is_found_by_search_and_never_made_twice(
    workers, sandbox, stripe_charge
):
    fault(sandbox, "commit_then_drop")

    action = settled(workers, approved_charge(stripe_charge))

    assert action.status == "succeeded", (action.error_class, action.last_error)
    [charge] = Charge.objects.using("sandbox").all()
    assert action.receipt.receipt_id == charge.receipt_id
    assert action.receipt.intent_digest == action.intent_digest
    # The one attempt's answer was lost; the search by its key found the charge.
    attempts = list(action.attempts.order_by("number").values_list("status", flat=True))
    assert attempts == ["settled_by_query"]
    assert action.receipt.source == "query"


def test_stripes_error_shapes_for_what_the_sandbox_does_not_understand(sandbox):
    search = requests.get(
        sandbox + "stripe/v1/charges/search", params={"query": "amount>100"}, timeout=5
    )
    assert search.status_code == 400
    assert search.json()["error"]["type"] == "invalid_request_error"
    missing = requests.get(sandbox + "stripe/v1/charges/ch_nope", timeout=5)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "resource_missing")
    json_body = requests.post(
        sandbox + "stripe/v1/charges",
        json={"customer": "cus_42", "amount": 1250, "currency": "eur"},
        headers={"Idempotency-Key": "k-json"},
        timeout=5,
    )
    assert json_body.status_code == 400
    assert "x-www-form-urlencoded" in json_body.json()["error"]["message"]


def test_connectors_test_passes_the_recipe_against_a_server_that_honours_keys(
    sandbox, stripe_charge, capsys
):
    call_command(
        "connectors",
        "test",
        "payments.charge",
        "--target",
        "cus_42",
        "--args",
        '{"amount": 1250, "currency": "eur"}',
        "--allow-writes",
    )
    printed = capsys.readouterr().out
    print(printed)

    for check in ("query_finds_the_receipt", "query_of_an_unused_key_is_none"):
        assert f"passed          {check}" in printed
    assert "passed          same_call_twice_same_receipt" in printed
    assert printed.endswith("payments.charge v1: 8 passed, 0 failed, 5 not applicable\n")
