"""A call longer than the lease's term still ends with its receipt: the worker renews the
lease while the call runs (runs/execution/heartbeat.py), so a slow but healthy call is never
taken for a dead worker's."""

from __future__ import annotations

import time

import pytest

from bench.tools import BenchNoop
from runs.execution.worker import process_action
from runs.models import Lease
from runs.services import lease_claim
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.registry import registered

pytestmark = pytest.mark.django_db(transaction=True)
TERM = 1


class SlowNoop(BenchNoop):
    """The benchmark's no-op, answering after three lease terms."""

    name = "bench.slow"

    def execute(self, call, *, timeout):
        time.sleep(3 * TERM)
        return super().execute(call, timeout=timeout)


def test_a_call_longer_than_the_lease_keeps_it_and_records_its_receipt(settings):
    settings.COUNTERSIGN_LEASE_SECONDS = TERM
    tenant = make_tenant()
    with registered(SlowNoop()):
        action = make_action(make_run(tenant), tool="bench.slow", target="item-1", args={"n": 1})
        approve(action, make_user(tenant, "operator"))
        lease = lease_claim(run_id=action.run_id, owner="worker")
        process_action(action_pk=action.pk, lease=lease, worker="worker")

    action.refresh_from_db()
    assert action.status == "succeeded"
    assert action.attempts.get().status == "succeeded"
    # The lease was renewed during the call: its version never moved to anyone else.
    assert Lease.objects.get(run_id=action.run_id).lease_version == lease.version
