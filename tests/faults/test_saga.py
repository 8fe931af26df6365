"""A saga failing mid-way leaves in the sandbox exactly the compensated set of effects."""

from __future__ import annotations

import pytest
import requests
from django.test import Client
from django.urls import reverse

from reconciliation.exceptions import ResolutionRefused
from reconciliation.models import ReconciliationCase
from reconciliation.services import case_resolve
from runs.models import Action
from runs.record.verification import run_verify
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.pages.conftest import client_for

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

    # The run page says the charge was undone, and links the refund and the charge.
    page = client_for(Client(), operator).get(reverse("run_detail", args=[run.pk]))
    html = page.content.decode()
    charge_card = html.split('id="action-charge"')[1].split("</article>")[0]
    undo_card = html.split('id="action-undo-charge"')[1].split("</article>")[0]
    assert "data-compensated>Compensated</span>" in charge_card
    assert f"<code>undo-charge</code></a> (succeeded, receipt <code>{undo.receipt.receipt_id}" in (
        charge_card
    )
    assert f"<code>charge</code></a>, receipt <code>{charge.receipt.receipt_id}" in undo_card
    assert "data-compensated" not in html.split('id="action-ship"')[1].split("</article>")[0]
    assert "data-run-compensated>compensated</span>" in html
    runs = client_for(Client(), operator).get(reverse("run_list")).content.decode()
    assert runs.count("data-run-compensated") == 1


def test_a_compensation_failing_for_good_opens_a_case_and_the_others_still_run(workers, sandbox):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    run = make_run(tenant, goal="charge twice, then ship", plan={"compensate_on_failure": True})
    charges = []
    for name, customer, cents in (("charge-a", "cus_1", 1000), ("charge-b", "cus_2", 2000)):
        charge = make_action(
            run,
            tool="payment.charge",
            target=customer,
            action_id=name,
            args={"amount_cents": cents, "currency": "EUR"},
        )
        approve(charge, operator)
        assert workers.run_burst() == 0
        charge.refresh_from_db()
        charges.append(charge)
    # Someone refunds charge-b by hand first: the saga's refund of it will be refused (409).
    requests.post(
        sandbox + "payments/refunds",
        json={"charge": charges[1].receipt.receipt_id, "amount_cents": 2000},
        headers={"Idempotency-Key": "refund-by-hand"},
        timeout=5,
    ).raise_for_status()
    ship = make_action(
        run, tool="ticket.close", target="ticket-404", action_id="ship", args={"resolution": "x"}
    )
    approve(ship, operator)
    assert workers.run_burst() == 0

    undo_b = Action.objects.get(run=run, action_id="undo-charge-b")
    approve(undo_b, operator)
    assert workers.run_burst() == 0
    undo_b.refresh_from_db()
    assert (undo_b.status, undo_b.error_class) == ("failed", "business_rejection")
    case = ReconciliationCase.objects.get(action=undo_b)
    assert (case.reason, case.status) == ("compensation_failed", "open")

    undo_a = Action.objects.get(run=run, action_id="undo-charge-a")  # the saga went on
    approve(undo_a, operator)
    assert workers.run_burst() == 0
    undo_a.refresh_from_db()
    run.refresh_from_db()
    assert undo_a.status == "succeeded"
    assert run.phase == "failed"
    assert run.stop_reason.startswith("ship (ticket.close) failed: invalid_arguments")
    assert run.stop_reason.endswith("(not undone: undo-charge-b; a reconciler decides)")
    assert run_verify(run) == []
    # Not every step was undone: the run is not called compensated, though undo-a succeeded.
    page = client_for(Client(), operator).get(reverse("run_detail", args=[run.pk]))
    assert "data-run-compensated" not in page.content.decode()

    with pytest.raises(ResolutionRefused, match="failed for good"):
        case_resolve(
            case=case, user=make_user(tenant, "reconciler"), resolution="not_applied", note="x"
        )
    resolved = case_resolve(
        case=case,
        user=make_user(tenant, "reconciler"),
        resolution="applied",
        note="refunded by hand before the saga",
        evidence={"observed_state": "charge fully refunded (refund-by-hand)"},
    )
    assert resolved.status == "resolved"
    undo_b.refresh_from_db()
    assert undo_b.status == "failed"
