"""Coalesced dispatch with real RQ workers: a burst of approvals makes a few drain jobs, each
write happens once, and no approval is left waiting on a drain job that has already made
its last claim. Redis losing its data loses nothing (the sweep re-drives)."""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection
from rq import Queue
from rq.job import Job

from control.foundation.counters import REDIS_COUNTERS
from runs.jobs import execute_run
from runs.models import Action, OutboxMessage
from runs.record.outbox import EXECUTE_JOB
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def _waiting_drains(queue) -> list[str]:
    jobs = Job.fetch_many(queue.job_ids, connection=queue.connection)
    return [job.id for job in jobs if job is not None and job.func_name == EXECUTE_JOB]


def _empty_jobs(queue) -> int:
    return int(queue.connection.hget(REDIS_COUNTERS, "duplicate_jobs") or 0)


def _proposed(tenant, count: int) -> list[Action]:
    return [
        make_action(make_run(tenant), target=f"ticket-{number}") for number in range(1, count + 1)
    ]


def _each_once(actions: list[Action], *, one_attempt: bool = True) -> None:
    for action in actions:
        action.refresh_from_db()
        assert action.status == "succeeded", (action.target, action.status)
        assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
        if one_attempt:
            assert action.attempts.count() == 1


def test_thirty_approvals_make_one_waiting_job_and_two_workers_write_each_once(
    workers, redis_queue
):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    actions = _proposed(tenant, 30)
    for action in actions:
        approve(action, operator)  # each relays on its own commit

    assert len(_waiting_drains(redis_queue)) == 1
    assert not OutboxMessage.objects.filter(job=EXECUTE_JOB, delivered_at__isnull=True).exists()
    burst = [workers.start(), workers.start()]
    for process in burst:
        process.wait(timeout=90)
    workers.assert_no_failed_jobs()

    _each_once(actions)
    # The first drain queues a helper for each full claim (20 actions): at most 1 + 2 drain
    # jobs for 30 writes, at least one of which did the work.
    assert _empty_jobs(redis_queue) <= 2
    assert redis_queue.count == 0


def test_an_approval_after_the_drain_jobs_last_claim_gets_a_job_of_its_own(workers, redis_queue):
    """The race: a drain job has made its last, empty claim but RQ still holds it (its
    worker has not finished the bookkeeping) when a new approval is relayed. Relying on
    that job would leave the approval waiting for the sweep."""
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    first, second = _proposed(tenant, 2)
    redis_queue.empty()  # the proposals' notices: the drain job is then the queue's head
    approve(first, operator)
    [taken] = _waiting_drains(redis_queue)
    # A worker takes the job exactly as RQ's worker does, and runs it: the drain writes the
    # first action and its last claim finds nothing. The job is still in Redis, running.
    job, _ = Queue.dequeue_any([redis_queue], timeout=None, connection=redis_queue.connection)
    assert job.id == taken
    assert execute_run(*job.args, **job.kwargs) == 1
    assert Job.exists(taken, connection=redis_queue.connection)

    approve(second, operator)

    message = OutboxMessage.objects.get(action=second, job=EXECUTE_JOB)
    assert message.delivered_at is not None
    assert [job_id for job_id in _waiting_drains(redis_queue) if job_id != taken]
    job.delete()  # the first worker's bookkeeping ends (result_ttl=0)
    assert workers.run_burst() == 0
    _each_once([first, second])


def test_approvals_trickling_in_while_workers_drain_are_all_written_without_a_sweep(
    workers, redis_queue
):
    """Approvals arrive at random moments while two workers drain and go idle again: each
    one is dispatched by its relay alone (no sweep runs here). The exact race is pinned by
    the test above; this is the same promise under real timing."""
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    actions = _proposed(tenant, 40)
    listening = [workers.start(burst=False), workers.start(burst=False)]
    rng = random.Random(17)

    def approve_all() -> None:
        try:
            for action in actions:
                time.sleep(rng.uniform(0, 0.08))
                approve(action, operator)
        finally:
            connection.close()

    approver = threading.Thread(target=approve_all)
    approver.start()
    approver.join(timeout=120)
    wait_until(
        lambda: (
            not Action.objects.filter(pk__in=[a.pk for a in actions])
            .exclude(status="succeeded")
            .exists()
        ),
        timeout=60,
        message="an approval was left waiting (it needed the sweep)",
    )
    assert all(process.poll() is None for process in listening)
    _each_once(actions)


def test_redis_flushed_midway_then_the_sweep_finishes_every_write_once(workers, redis_queue):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    actions = _proposed(tenant, 24)
    for action in actions[:12]:
        approve(action, operator)
    worker = workers.start(burst=False)
    wait_until(
        lambda: Action.objects.filter(status="succeeded").count() >= 3,
        message="the worker wrote nothing",
    )
    # Redis loses everything mid-drain: the waiting and running jobs and the waiting-job
    # hint. Approvals made while Redis is empty must not count on a job that is gone.
    redis_queue.connection.flushdb()
    for action in actions[12:]:
        approve(action, operator)
    worker.kill()
    worker.wait(timeout=10)
    redis_queue.connection.flushdb()  # and again, with the new approvals' job in it
    with connection.cursor() as cursor:  # the dead worker's lease runs out on the db clock
        cursor.execute("UPDATE runs_lease SET expires_at = now() - interval '1 second'")
    assert Action.objects.exclude(status="succeeded").exists()

    call_command("sweep", verbosity=0)
    assert len(_waiting_drains(redis_queue)) == 1
    assert workers.run_burst() == 0

    # A kill between the attempt and the call leaves a retry under the same key.
    _each_once(actions, one_attempt=False)
