"""Budget: a run stops as budget_exhausted before the call that would exceed it, never after."""

from __future__ import annotations

import pytest

from runs.exceptions import InvalidTransition
from runs.execution.worker import settle_unknown
from runs.models import Action, Attempt, Run
from runs.record.verification import run_verify
from runs.services import lease_claim, protocol
from runs.tools.retry import DEFAULT_POLICY
from tests.api.support import execute_with_receipt
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("noop_tool")]
WORKER = "budget-worker"


def approved_noop(run: Run, number: int = 1) -> Action:
    action = make_action(
        run, tool="bench.noop", action_id=f"noop-{number}", target=f"item-{number}", args={}
    )
    approve(action, make_user(run.tenant, "operator"))
    return action


def test_a_retry_that_would_exceed_the_budget_stops_the_run_before_it_is_sent():
    run = make_run(make_tenant(), budget_limit=1)
    action = approved_noop(run)
    lease = lease_claim(run_id=run.pk, owner=WORKER)
    first = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=WORKER)
    protocol.attempt_failed(
        attempt_pk=first.pk,
        lease=lease,
        error_class="transient",
        detail="503 before anything was done",
        worker=WORKER,
        retry_in=0,
    )

    second = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=WORKER)

    run.refresh_from_db()
    action.refresh_from_db()
    assert second is None
    assert (run.phase, run.budget_used, run.stop_reason) == ("budget_exhausted", 1, "budget spent")
    assert action.status == "cancelled"
    assert Attempt.objects.filter(action=action).count() == 1
    stop = run.events.get(type="run.budget_exhausted")
    assert [entry["action_id"] for entry in stop.payload["report"]["not_started"]] == ["noop-1"]


def test_a_proposal_once_the_budget_is_spent_stops_the_run_and_freezes_nothing():
    run = make_run(make_tenant(), budget_limit=1)
    execute_with_receipt(approved_noop(run))
    run.refresh_from_db()
    assert (run.phase, run.budget_used) == ("running", 1)

    with pytest.raises(InvalidTransition, match="budget_exhausted"):
        approved_noop(run, number=2)

    run.refresh_from_db()
    assert run.phase == "budget_exhausted"
    assert list(run.actions.values_list("action_id", "status")) == [("noop-1", "succeeded")]


def test_a_run_within_its_budget_sends_every_write():
    run = make_run(make_tenant(), budget_limit=2)
    for number in (1, 2):
        execute_with_receipt(approved_noop(run, number))
        run.refresh_from_db()
    assert (run.phase, run.budget_used) == ("running", 2)
    assert run.actions.filter(status="succeeded").count() == 2


def test_an_attempt_a_dead_worker_left_sending_is_charged_once_when_it_is_settled():
    run = make_run(make_tenant(), budget_limit=2)
    action = approved_noop(run)
    lease = lease_claim(run_id=run.pk, owner=WORKER)
    approved_at = Run.objects.get(pk=run.pk).state_version
    protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=WORKER)
    run.refresh_from_db()
    # The begin is rows only: the attempt spends the budget in the event of its outcome.
    assert (run.budget_used, run.state_version) == (0, approved_at)

    # The worker dies here; recovery asks the tool by the same key and records what it finds.
    action.refresh_from_db()
    settle_unknown(action=action, lease=lease, worker=WORKER, policy=DEFAULT_POLICY)

    run.refresh_from_db()
    action.refresh_from_db()
    assert (action.status, run.budget_used) == ("succeeded", 1)
    assert Attempt.objects.get(action=action).status == "settled_by_query"
    assert run_verify(run) == []
