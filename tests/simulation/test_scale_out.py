"""Scale-out: two worker processes and two sweepers on one database, and leases timed by the
database's clock, never a worker's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
import requests
import time_machine
from django.db.models import Count
from django.utils import timezone

from control.foundation.clock import db_now
from runs.exceptions import LeaseBusy
from runs.models import Action, Lease
from runs.services import lease_claim
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.processes import ROOT, wait_until

SETTLED = {"succeeded", "satisfied", "failed", "uncertain"}


def _sandbox_handling_requests() -> bool:
    """The live server (where the sandbox answers) runs each connection in a thread of its
    own, named after socketserver's process_request_thread."""
    return any("process_request_thread" in thread.name for thread in threading.enumerate())


def start_sweeper(workers) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "manage.py", "sweep", "--loop", "--interval", "0.3", "-v", "0"],
        cwd=ROOT,
        env=workers.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    workers.processes.append(process)  # stopped with the workers at teardown
    return process


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_two_workers_and_two_sweepers_on_one_database_never_apply_an_intent_twice(workers, sandbox):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    actions = []
    for number in range(1, 25):
        action = make_action(
            make_run(tenant), target=f"ticket-{number}", action_id=f"close-{number}"
        )
        approve(action, operator)
        actions.append(action)
    for number in range(1, 7):
        action = make_action(
            make_run(tenant),
            tool="notify.send",
            target=f"person-{number}@example.com",
            args={"body": f"update {number}"},
            action_id=f"notify-{number}",
        )
        approve(action, operator)
        actions.append(action)
    for tool, fault in (("ticket.close", "commit_then_drop"), ("ticket.close", "slow:300")):
        requests.post(
            sandbox + "faults", timeout=5, json={"tool": tool, "fault": fault, "count": 3}
        ).raise_for_status()

    first = workers.start(burst=False)
    workers.start(burst=False)
    start_sweeper(workers)
    start_sweeper(workers)
    # One worker dies mid-way: its leases run out on the database clock and get taken over.
    wait_until(
        lambda: (
            Action.objects.filter(pk__in=[a.pk for a in actions], status="succeeded").count() >= 5
        ),
        timeout=60,
        message="the workers made no progress",
    )
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    workers.start(burst=False)

    wait_until(
        lambda: (
            set(
                Action.objects.filter(pk__in=[a.pk for a in actions]).values_list(
                    "status", flat=True
                )
            )
            <= SETTLED
        ),
        timeout=120,
        interval=0.3,
        message="actions did not settle",
    )
    # A straggling duplicate would be a call still inside the sandbox: stop every worker and
    # sweeper, then wait for the sandbox (a server thread in this process) to finish each
    # request it is still handling.
    workers.stop_all()
    wait_until(
        lambda: not _sandbox_handling_requests(),
        timeout=60,
        message="the sandbox kept handling a request after every worker stopped",
    )

    per_key = Effect.objects.filter(tool="ticket.close").values("idempotency_key")
    duplicates = per_key.annotate(n=Count("pk")).filter(n__gt=1)
    assert not duplicates.exists(), list(duplicates)
    per_recipient = Effect.objects.filter(tool="notify.send").values("target")
    assert not per_recipient.annotate(n=Count("pk")).filter(n__gt=1).exists()
    closes = [a for a in actions if a.tool == "ticket.close"]
    statuses = Action.objects.filter(pk__in=[a.pk for a in closes]).values_list("status", flat=True)
    assert set(statuses) == {"succeeded"}
    for action in closes:
        assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1


@pytest.mark.django_db
def test_a_lease_is_timed_by_the_database_clock_whatever_the_workers_clock_says():
    run = make_run(make_tenant())
    with time_machine.travel(timezone.now() + timedelta(days=1), tick=False):
        token = lease_claim(run_id=run.pk, owner="worker-with-a-fast-clock", seconds=30)
        expires_at = Lease.objects.get(run=run).expires_at
        # A worker whose clock runs a day ahead still cannot take a lease the database says
        # is held, and the expiry it wrote is the database's now + 30 s, not its own.
        with pytest.raises(LeaseBusy):
            lease_claim(run_id=run.pk, owner="another-fast-worker", seconds=30)
    assert abs((expires_at - db_now()).total_seconds() - 30) < 5
    assert token.version == 1

    with time_machine.travel(timezone.now() - timedelta(days=1), tick=False):
        Lease.objects.filter(run=run).update(expires_at=db_now() - timedelta(seconds=1))
        # A worker whose clock runs a day behind can take a lease the database says expired.
        taken = lease_claim(run_id=run.pk, owner="worker-with-a-slow-clock", seconds=30)
    assert taken.version == 2
