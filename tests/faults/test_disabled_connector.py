"""A connector disabled for a tenant after its intent was approved: the worker fails the
action closed with the reason and never sends it; other tenants' work goes on. One whose
write was already in flight goes to a person, and nothing asks the system by its key."""

from __future__ import annotations

import pytest

from reconciliation.exceptions import ResolutionRefused
from reconciliation.models import ReconciliationCase
from reconciliation.probes import probe_due_cases
from reconciliation.services import case_resolve, open_missing_cases
from runs.execution.worker import process_action
from runs.services import connectors_disable, lease_claim, protocol
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def approved(tenant, **fields):
    action = make_action(make_run(tenant), **fields)
    approve(action, make_user(tenant, "operator"))
    return action


def test_an_approved_write_of_a_connector_disabled_since_fails_closed_and_is_never_sent(workers):
    tenant, other = make_tenant(), make_tenant()
    closed_here = approved(tenant, target="ticket-31")
    closed_there = approved(other, target="ticket-32")
    assert closed_here.status == "approved"
    connectors_disable(tenant=tenant, connectors=["ticket"], actor="admin")

    assert workers.run_burst() == 0  # and no job raised (the harness checks the registry)

    closed_here.refresh_from_db()
    closed_there.refresh_from_db()
    assert (closed_here.status, closed_here.error_class) == ("failed", "connector_not_enabled")
    reason = f"connector 'ticket' is not enabled for tenant '{tenant.name}'"
    assert closed_here.last_error == reason
    assert not closed_here.attempts.exists()
    closed_here.run.refresh_from_db()
    assert closed_here.run.phase == "failed"
    assert reason in closed_here.run.stop_reason
    assert not Effect.objects.filter(target="ticket-31").exists()
    assert closed_there.status == "succeeded"
    assert Effect.objects.filter(target="ticket-32").count() == 1


def test_a_write_in_flight_when_its_connector_was_disabled_goes_to_a_person(sandbox):
    tenant = make_tenant()
    action = approved(tenant, target="ticket-33")
    lease = lease_claim(run_id=action.run_id, owner="worker-a")
    protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="worker-a")
    connectors_disable(tenant=tenant, connectors=["ticket"], actor="admin")

    process_action(action_pk=action.pk, lease=lease, worker="worker-a")

    action.refresh_from_db()
    assert (action.status, action.error_class) == ("uncertain", "connector_not_enabled")
    open_missing_cases()
    assert probe_due_cases() == 1
    case = ReconciliationCase.objects.get(action=action)
    assert "connector 'ticket' is not enabled" in case.findings[0]["query"]
    for _ in range(2):  # what no probe can prove reaches a person
        ReconciliationCase.objects.filter(pk=case.pk, status="probing").update(
            next_probe_at=case.opened_at
        )
        probe_due_cases()
    case.refresh_from_db()
    assert case.status == "open"
    reconciler = make_user(tenant, "reconciler")
    with pytest.raises(ResolutionRefused, match="nothing can be sent with it"):
        case_resolve(case=case, user=reconciler, resolution="not_applied", note="absent")
    assert not Effect.objects.filter(target="ticket-33").exists()
