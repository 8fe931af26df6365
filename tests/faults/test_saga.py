"""A saga failing mid-way leaves in the sandbox exactly the compensated set of effects."""

from __future__ import annotations

import pytest

from runs.models import Action
from runs.record.verification import run_verify
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def test_a_step_failing_for_good_refunds_the_completed_charge_and_stops_the_run(workers):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    run = make_run(tenant, goal="charge, then ship", plan={"compensate_on_failure": True})
    charge = make_action(
        run,
        tool="payment.charge",
        target="cus_42",
        action_id="charge",
        args={"amount_cents": 2500, "currency": "EUR"},
    )
    approve(charge, operator)
    assert workers.run_burst() == 0
    charge.refresh_from_db()
    assert charge.status == "succeeded"

    ship = make_action(
        run,
        tool="ticket.close",
        target="ticket-404",
        action_id="ship",
        args={"resolution": "shipped"},
    )
    approve(ship, operator)
    assert workers.run_burst() == 0, workers.last_output
    ship.refresh_from_db()
    assert (ship.status, ship.error_class) == ("failed", "invalid_arguments"), workers.last_output

    undo = Action.objects.get(run=run, action_id="undo-charge")
    assert (undo.tool, undo.target, undo.args) == (
        "payment.refund",
        charge.receipt.receipt_id,
        {"amount_cents": 2500},
    )
    approve(undo, operator)
    assert workers.run_burst() == 0
    undo.refresh_from_db()
    run.refresh_from_db()
    assert undo.status == "succeeded"
    assert run.phase == "failed"
    assert run.stop_reason.startswith("ship (ticket.close) failed: invalid_arguments")
    assert run.stop_reason.endswith("(completed steps compensated)")
    effects = sorted(Effect.objects.values_list("tool", "idempotency_key"))
    assert effects == sorted(
        [
            ("payment.charge", charge.idempotency_key),
            ("payment.refund", undo.idempotency_key),
        ]
    )
    assert run_verify(run) == []
