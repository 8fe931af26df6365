"""An http connector with `body_encoding = "form"` against the sandbox's form-only charge
route (Stripe's shape: a form body with `metadata[...]` nesting, Idempotency-Key; a JSON body
answered 400), with real worker processes: the charge is made once with the approved
amount, also when the server commits and then answers 503."""

from __future__ import annotations

import contextlib

import pytest
import requests

from runs.models import Action
from sandbox.models import Charge, Effect
from tests.factories import approved_action
from tests.processes import settled
from tests.registry import connector_tools, registered

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

FORM_CONNECTOR = """
[connectors.cards]
kind = "http"
description = "A form-encoded payment API shaped like Stripe's."
base_url = "${COUNTERSIGN_SANDBOX_URL}"

[connectors.cards.tools.charge]
description = "Charge a customer."
contract_version = "v1"
effect_class = "idempotent"
target_schema = { type = "string", pattern = "^cus_[0-9]{1,10}$" }
path = "payments/form/charges"
idempotency_header = "Idempotency-Key"
body_encoding = "form"
receipt = { id = "{/receipt_id}", status = "{/status}", key = "{/idempotency_key}" }
query.path = "receipts/{key}"
query.absent = { status = 404, pointer = "/type", equals = "not_found" }

[connectors.cards.tools.charge.args_schema]
type = "object"
required = ["amount", "currency", "order"]
additionalProperties = false
properties.amount = { type = "integer", minimum = 1, maximum = 99999999 }
properties.currency = { type = "string", pattern = "^[a-z]{3}$" }
properties.order = { type = "string", pattern = "^[0-9]{1,10}$" }

[connectors.cards.tools.charge.body]
customer = "{target}"
amount = "{args.amount}"
currency = "{args.currency}"
metadata = { order = "{args.order}", countersign_key = "{key}" }
"""


@pytest.fixture
def card_charge(sandbox, tmp_path, monkeypatch):
    [tool] = connector_tools(tmp_path, FORM_CONNECTOR, environ={"COUNTERSIGN_SANDBOX_URL": sandbox})
    monkeypatch.setenv("COUNTERSIGN_CONNECTORS", str(tmp_path / "connectors.toml"))
    with contextlib.ExitStack() as stack:
        yield stack.enter_context(registered(tool))


def _approved_charge(tool) -> Action:
    return approved_action(
        tool.name,
        target="cus_42",
        args={"amount": 1250, "currency": "eur", "order": "7"},
        action_id="charge-order-7",
        goal="charge cus_42 for order 7",
    )


def test_the_form_only_server_refuses_json_as_stripe_does(sandbox):
    answer = requests.post(
        sandbox + "payments/form/charges",
        json={"customer": "cus_42", "amount": 1250, "currency": "eur"},
        headers={"Idempotency-Key": "k-json"},
        timeout=5,
    )
    assert answer.status_code == 400
    assert "application/x-www-form-urlencoded" in answer.json()["detail"]


@pytest.mark.parametrize("fault", [None, "commit_then_fail"])
def test_an_approved_form_charge_is_made_once_with_the_approved_amount(
    workers, sandbox, card_charge, fault
):
    action = _approved_charge(card_charge)
    if fault:
        requests.post(
            sandbox + "faults",
            json={"tool": "payment.charge", "fault": fault, "count": 1},
            timeout=5,
        ).raise_for_status()

    settled(workers, action)

    assert action.status == "succeeded", (action.error_class, action.last_error)
    [charge] = Charge.objects.using("sandbox").all()
    assert (charge.customer, charge.amount_cents, charge.currency) == ("cus_42", 1250, "EUR")
    assert charge.receipt_id == action.receipt.receipt_id
    [effect] = Effect.objects.using("sandbox").filter(target="cus_42")
    assert effect.idempotency_key == action.idempotency_key
    attempts = list(action.attempts.order_by("number").values_list("status", "error_class"))
    # After the 503 that followed the commit, the same key went again and the API answered
    # the stored charge: one charge, two attempts.
    expected = (
        [("succeeded", "")] if fault is None else [("failed", "transient"), ("succeeded", "")]
    )
    assert attempts == expected
