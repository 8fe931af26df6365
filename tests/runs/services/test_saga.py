"""A saga never guesses about a completed step whose tool the server no longer knows (its
connector was removed), nor proposes an undo the tenant may no longer send (its connector
disabled): the run ends failed and its stop reason names the step for a person."""

from __future__ import annotations

import pytest

from runs.execution.worker import process_action
from runs.services import connectors_disable, lease_claim
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.registry import connector_tools, registered

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

# A desk whose close always meets an unknown path: the step fails for good (invalid_arguments).
LOST_DESK = """
[connectors.desk]
kind = "http"
base_url = "${COUNTERSIGN_SANDBOX_URL}"

[connectors.desk.tools.close]
contract_version = "v1"
effect_class = "idempotent"
path = "no-such-desk/{target}"
idempotency_header = "Idempotency-Key"
receipt = { id = "/id" }
target_schema = { type = "string", maxLength = 64 }
args_schema = { type = "object", properties = {}, additionalProperties = false }
"""


def run_once(action):
    lease = lease_claim(run_id=action.run_id, owner="worker")
    process_action(action_pk=action.pk, lease=lease, worker="worker")
    action.refresh_from_db()


def test_a_completed_step_of_a_removed_connector_is_named_not_guessed(sandbox, tmp_path, settings):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    run = make_run(tenant, goal="charge, then close", plan={"compensate_on_failure": True})
    charge = make_action(
        run,
        tool="payment.charge",
        target="cus_42",
        action_id="charge",
        args={"amount_cents": 2500, "currency": "EUR"},
    )
    approve(charge, operator)
    run_once(charge)
    assert charge.status == "succeeded"

    [desk] = connector_tools(tmp_path, LOST_DESK, environ={"COUNTERSIGN_SANDBOX_URL": sandbox})
    with registered(desk):
        close = make_action(run, tool="desk.close", target="t-1", action_id="close", args={})
        approve(close, operator)
        settings.SANDBOX_ENABLED = False  # the payment connector is gone from this server
        run_once(close)

    run.refresh_from_db()
    assert (close.status, close.error_class) == ("failed", "invalid_arguments")
    assert run.phase == "failed"
    assert "cannot tell whether charge (payment.charge v1) needs undoing" in run.stop_reason
    assert not run.actions.filter(action_id="undo-charge").exists()


def test_a_step_whose_compensation_is_no_longer_enabled_for_the_tenant_is_named(sandbox, tmp_path):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    run = make_run(tenant, goal="charge, then close", plan={"compensate_on_failure": True})
    charge = make_action(
        run,
        tool="payment.charge",
        target="cus_43",
        action_id="charge",
        args={"amount_cents": 2500, "currency": "EUR"},
    )
    approve(charge, operator)
    run_once(charge)
    assert charge.status == "succeeded"

    [desk] = connector_tools(tmp_path, LOST_DESK, environ={"COUNTERSIGN_SANDBOX_URL": sandbox})
    with registered(desk):
        close = make_action(run, tool="desk.close", target="t-2", action_id="close", args={})
        approve(close, operator)
        connectors_disable(tenant=tenant, connectors=["payment"], actor="admin")
        run_once(close)

    run.refresh_from_db()
    assert (close.status, close.error_class) == ("failed", "invalid_arguments")
    assert run.phase == "failed"
    assert (
        f"cannot undo charge (payment.charge v1): connector 'payment' is not enabled for "
        f"tenant '{tenant.name}'"
    ) in run.stop_reason
    assert not run.actions.filter(action_id="undo-charge").exists()
