"""Leases on database time with a fencing version that only grows."""

from __future__ import annotations

import time

import pytest

from runs.exceptions import LeaseBusy, LeaseLost
from runs.execution.worker import claim_ready
from runs.record.events import append_event
from runs.services import lease_claim, lease_release, lease_renew
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db


def test_a_held_lease_refuses_another_owner():
    run = make_run(make_tenant())
    first = lease_claim(run_id=run.pk, owner="worker-a")
    with pytest.raises(LeaseBusy):
        lease_claim(run_id=run.pk, owner="worker-b")
    assert first.version == 1


def test_the_owner_reclaiming_gets_a_higher_version():
    run = make_run(make_tenant())
    first = lease_claim(run_id=run.pk, owner="worker-a")
    second = lease_claim(run_id=run.pk, owner="worker-a")
    assert second.version == first.version + 1


def test_an_expired_lease_is_taken_over_and_the_stale_holder_cannot_write():
    run = make_run(make_tenant())
    stale = lease_claim(run_id=run.pk, owner="worker-a", seconds=1)
    time.sleep(1.1)
    fresh = lease_claim(run_id=run.pk, owner="worker-b")
    assert fresh.version > stale.version
    run.refresh_from_db()
    with pytest.raises(LeaseLost):
        append_event(run, type="step", actor="worker-a", lease=stale)
    with pytest.raises(LeaseLost):
        lease_renew(lease=stale)
    append_event(run, type="step", actor="worker-b", lease=fresh)
    run.refresh_from_db()
    assert run.state_version == 2


def test_a_released_lease_can_be_claimed_at_once_and_the_old_token_is_dead():
    run = make_run(make_tenant())
    token = lease_claim(run_id=run.pk, owner="worker-a")
    lease_renew(lease=token)
    lease_release(lease=token)
    other = lease_claim(run_id=run.pk, owner="worker-b")
    assert other.version == token.version + 1
    run.refresh_from_db()
    with pytest.raises(LeaseLost):
        append_event(run, type="step", actor="worker-a", lease=token)


@pytest.mark.postgresql
def test_a_second_worker_claims_past_the_runs_a_busy_worker_holds(django_assert_num_queries):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    for number in range(1, 26):
        action = make_action(make_run(tenant), target=f"ticket-{number}")
        approve(action, operator)
    busy = claim_ready(worker="worker-a", batch=20)
    # The oldest 20 due actions are worker-a's: worker-b takes the 5 behind them, rather
    # than trying those 20 leases, failing, and leaving with nothing.
    # The two reads (ready, then orphaned), then one compare-and-set of all five leases that
    # returns their versions, inside the claim's own savepoint: whatever the count.
    with django_assert_num_queries(1 + 2 + 1 + 1):
        other = claim_ready(worker="worker-b", batch=20)
    assert len(busy) == 20
    assert len(other) == 5
    assert not {lease.run_id for _, lease in busy} & {lease.run_id for _, lease in other}
    assert claim_ready(worker="worker-c", batch=20) == []
