"""A worker paused past its lease (SIGSTOP) is fenced out when it wakes (SIGCONT)."""

from __future__ import annotations

import signal

import pytest
from django.core.management import call_command
from django.db.models.functions import Now

from control.foundation.counters import REDIS_COUNTERS
from runs.models import Action, RunEvent
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def _stopped(process) -> bool:
    with open(f"/proc/{process.pid}/stat") as stat:
        return stat.read().split(") ", 1)[1].startswith("T")


@pytest.mark.parametrize("point", ["before_send", "attempt_recorded"])
def test_a_paused_worker_woken_after_a_takeover_writes_and_sends_nothing(
    workers, redis_queue, point
):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    stale = workers.start(fault_point=f"pause:{point}")
    wait_until(lambda: _stopped(stale), message="the worker never reached the pause point")
    events_before = RunEvent.objects.filter(run=action.run).count()

    # Its lease runs out on the database clock; another worker takes over and finishes.
    wait_until(
        lambda: Action.objects.filter(pk=action.pk, run__lease__expires_at__lt=Now()).exists(),
        timeout=10,
        message="the lease never expired",
    )
    call_command("sweep", verbosity=0)
    assert workers.run_burst() == 0
    action.refresh_from_db()
    assert action.status == "succeeded"
    taken_over = RunEvent.objects.filter(run=action.run).count()
    assert taken_over > events_before

    stale.send_signal(signal.SIGCONT)
    stale.wait(timeout=30)
    assert stale.returncode == 0
    assert RunEvent.objects.filter(run=action.run).count() == taken_over
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
    assert action.attempts.filter(status="succeeded").count() == 1
    if point == "attempt_recorded":  # it woke holding an attempt: its lease check refused it
        counters = redis_queue.connection.hgetall(REDIS_COUNTERS)
        assert int(counters[b"fencing_rejections"]) == 1
