"""A tool removed after proposal (or a contract version no worker knows) fails its action
closed with a clear reason; it never raises out of the worker, never holds the batch's other
actions, and never stops the sweep."""

from __future__ import annotations

import pytest

from bench.tools import BenchNoop
from reconciliation.exceptions import ResolutionRefused
from reconciliation.models import ReconciliationCase
from reconciliation.probes import probe_due_cases
from reconciliation.services import case_resolve, open_missing_cases
from runs.execution.worker import process_action
from runs.models import Action
from runs.services import lease_claim, protocol, recovery
from runs.tools.registry import unregister_tool
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.registry import registered

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


@pytest.fixture
def noop_known_here_only():
    """bench.noop is registered in this process, not in the worker processes the tests start:
    to a worker it is a tool that was removed after the intent was proposed."""
    with registered(BenchNoop()) as tool:
        yield tool


def approved(tenant, operator, **fields) -> Action:
    action = make_action(make_run(tenant), **fields)
    approve(action, operator)
    return action


def test_an_unknown_tool_fails_its_action_closed_and_the_batch_goes_on(
    workers, noop_known_here_only
):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    gone = approved(tenant, operator, tool="bench.noop", target="item-1", args={})
    close = approved(tenant, operator, target="ticket-21")

    assert workers.run_burst() == 0  # and no job raised (the harness checks the registry)

    gone.refresh_from_db()
    close.refresh_from_db()
    gone.run.refresh_from_db()
    assert (gone.status, gone.error_class) == ("failed", "unsupported_tool")
    assert "bench.noop" in gone.last_error
    assert gone.run.phase == "failed"
    assert "unknown tool 'bench.noop'" in gone.run.stop_reason
    assert gone.attempts.count() == 0
    assert close.status == "succeeded"
    assert Effect.objects.filter(target="ticket-21").count() == 1


def test_a_write_in_flight_whose_tool_is_gone_goes_to_a_person(sandbox, noop_known_here_only):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    action = approved(tenant, operator, tool="bench.noop", target="item-2", args={})
    other = approved(tenant, operator, target="ticket-22")
    lease = lease_claim(run_id=action.run_id, owner="worker-a")
    protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="worker-a")
    unregister_tool(noop_known_here_only)  # removed while the write was in flight

    process_action(action_pk=action.pk, lease=lease, worker="worker-a")
    action.refresh_from_db()
    assert (action.status, action.error_class) == ("uncertain", "unsupported_tool")

    open_missing_cases()
    other_case = make_uncertain_case(other)
    assert probe_due_cases() == 2  # the case whose tool is gone does not stop the others
    case = ReconciliationCase.objects.get(action=action)
    assert "unsupported_tool" in case.findings[0]["query"]
    for _ in range(2):
        ReconciliationCase.objects.filter(pk=case.pk, status="probing").update(
            next_probe_at=case.opened_at
        )
        probe_due_cases()
    case.refresh_from_db()
    assert case.status == "open"
    reconciler = make_user(tenant, "reconciler")
    with pytest.raises(ResolutionRefused, match="nothing can be sent with it"):
        case_resolve(case=case, user=reconciler, resolution="not_applied", note="absent")
    resolved = case_resolve(case=case, user=reconciler, resolution="abandon", note="tool retired")
    assert resolved.status == "resolved"
    other_case.refresh_from_db()
    assert other_case.probes >= 1


def make_uncertain_case(action: Action) -> ReconciliationCase:
    lease = lease_claim(run_id=action.run_id, owner="worker-b")
    protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="worker-b")
    recovery.action_uncertain(
        action_pk=action.pk,
        lease=lease,
        reason="tool_result_uncertain",
        detail="dropped",
        worker="worker-b",
    )
    open_missing_cases()
    return ReconciliationCase.objects.get(action=action)
