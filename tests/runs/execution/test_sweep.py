"""The sweep re-drives work from PostgreSQL; two sweepers at once are safe."""

from __future__ import annotations

import threading
import time

import django_rq
import pytest
from django.conf import settings
from django.db import connection
from rq import Queue

from runs.execution.sweep import sweep_once
from runs.models import Action, OutboxMessage
from tests.factories import approve, make_action, make_policy, make_run, make_tenant, make_user


@pytest.fixture
def queue():
    queue = django_rq.get_queue(settings.RQ_EXECUTION_QUEUE)
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


@pytest.mark.django_db(transaction=True)
def test_an_outbox_message_the_commit_hook_never_relayed_is_relayed_by_the_sweep(queue):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    message = OutboxMessage.objects.get(action=action, job="runs.jobs.execute_run")
    # The relay ran after commit; play a lost hand-off (Redis down then, or a crash).
    OutboxMessage.objects.update(delivered_at=None)
    queue.connection.flushdb()
    report = sweep_once()
    message.refresh_from_db()
    assert report.relayed == OutboxMessage.objects.count()
    assert message.delivered_at is not None
    # The execute message rides the drain job now waiting; the notice has a job of its own.
    assert sorted((job.func_name, job.id.split("-")[0]) for job in queue.jobs) == [
        ("runs.jobs.execute_run", "drain"),
        ("runs.notifications.approval_notify", "outbox"),
    ]
    assert sweep_once().relayed == 0


@pytest.mark.django_db(transaction=True)
def test_the_sweep_queues_a_drain_when_actions_are_due_and_not_twice(queue):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    queue.connection.flushdb()  # Redis lost the execute job the approval queued
    first, second = sweep_once(), sweep_once()
    assert first.drains_enqueued == 1
    assert second.drains_enqueued == 0
    assert [job.func_name for job in queue.jobs] == ["runs.jobs.execute_run"]


@pytest.mark.django_db(transaction=True)
def test_the_sweep_queues_a_drain_when_the_waiting_one_was_taken_by_a_worker(queue):
    """A drain job a worker has taken may be past its last claim: it covers nothing new."""
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    queue.empty()  # the proposal's notice
    approve(action, make_user(tenant, "operator"))
    [waiting] = queue.job_ids
    Queue.dequeue_any([queue], timeout=None, connection=queue.connection)  # as RQ's worker
    report = sweep_once()
    assert report.drains_enqueued == 1
    assert queue.job_ids != [waiting]
    assert len(queue.job_ids) == 1


@pytest.mark.django_db(transaction=True)
def test_two_sweepers_at_once_expire_each_request_exactly_once(queue):
    tenant = make_tenant()
    make_policy(tenant, "ticket.close", approval_seconds=1)
    actions = [make_action(make_run(tenant), target=f"ticket-{n}") for n in range(1, 7)]
    time.sleep(1.1)
    reports = []

    def sweep():
        try:
            reports.append(sweep_once())
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(report.expired for report in reports) == len(actions)
    statuses = set(Action.objects.values_list("status", flat=True))
    assert statuses == {"expired"}
    for action in actions:
        assert action.run.events.filter(type="action.expired").count() == 1
