"""Redis is only delivery: flushing it with work queued and in flight loses nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
import requests
from django.core.management import call_command
from django.db.models.functions import Now

from runs.models import Action, Lease, OutboxMessage
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def test_flushall_with_actions_queued_and_in_flight_then_one_sweep_finishes_all_once(
    workers, redis_queue, sandbox
):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    actions = []
    for number in range(1, 11):
        action = make_action(make_run(tenant), target=f"ticket-{number}")
        approve(action, operator)
        actions.append(action)
    assert OutboxMessage.objects.count() == 20  # executes and notices
    assert redis_queue.count == 11  # a notice each, and one drain job for the ten executes
    requests.post(
        sandbox + "faults",
        timeout=5,
        json={
            "tool": "ticket.close",
            "fault": "slow:400",
            "count": 3,
        },
    ).raise_for_status()
    worker = workers.start(burst=False)
    wait_until(
        lambda: Action.objects.filter(status="in_flight").exists(), message="nothing went in flight"
    )
    # Redis loses everything: the queued jobs and the job in flight; the worker dies too.
    redis_queue.connection.flushdb()
    worker.kill()
    worker.wait(timeout=10)
    # The dead worker's batch is in flight (its attempts begun together), the rest approved.
    left = Action.objects.filter(pk__in=[a.pk for a in actions])
    assert left.filter(status="in_flight").exists()
    assert set(left.values_list("status", flat=True)) <= {"in_flight", "approved"}
    # The dead worker's lease runs out on the database's clock.
    Lease.objects.update(expires_at=Now() - timedelta(seconds=1))

    call_command("sweep", verbosity=0)
    assert workers.run_burst() == 0

    statuses = set(
        Action.objects.filter(pk__in=[a.pk for a in actions]).values_list("status", flat=True)
    )
    assert statuses == {"succeeded"}
    for action in actions:
        assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
