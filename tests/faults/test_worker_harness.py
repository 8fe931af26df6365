"""The worker harness itself: a job that raises fails the test, even when the worker exits 0,
and a job RQ files as abandoned fails it unless its worker is one the test killed."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def _forget_failed_jobs(queue) -> None:
    registry = queue.failed_job_registry
    for job_id in registry.get_job_ids():
        registry.remove(job_id, delete_job=True)


def test_a_job_that_raises_fails_the_test_though_the_worker_exits_cleanly(workers, redis_queue):
    # A real job that raises inside the worker process: db_now takes no arguments.
    redis_queue.enqueue("control.foundation.clock.db_now", "an unexpected argument")

    with pytest.raises(
        AssertionError, match=r"(?s)RQ jobs raised:\ncontrol.foundation.clock.db_now: .*TypeError"
    ):
        workers.run_burst()

    _forget_failed_jobs(redis_queue)
    workers.assert_no_failed_jobs()


def _abandon_a_job(workers, redis_queue, *, kill: bool):
    """A harness worker's job that RQ files as abandoned: the registry's clock is moved past
    the job's expiry (as it would be an hour later), with the worker killed first or alive."""
    worker = workers.start(burst=False)
    job = redis_queue.enqueue("time.sleep", 30)
    wait_until(lambda: job.get_status(refresh=True) == "started", message="job never started")
    if kill:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    redis_queue.started_job_registry.cleanup(timestamp=time.time() + 3600)
    assert job.id in redis_queue.failed_job_registry.get_job_ids()


def test_a_job_abandoned_by_a_worker_the_test_killed_does_not_fail_the_test(workers, redis_queue):
    _abandon_a_job(workers, redis_queue, kill=True)

    workers.assert_no_failed_jobs()


def test_a_job_abandoned_by_a_worker_nobody_killed_fails_the_test(workers, redis_queue):
    # The worker still runs: RQ gave up on its job, and nothing the test did explains that.
    _abandon_a_job(workers, redis_queue, kill=False)

    with pytest.raises(AssertionError, match=r"RQ jobs raised:\ntime.sleep: .*AbandonedJobError"):
        workers.assert_no_failed_jobs()
    _forget_failed_jobs(redis_queue)
