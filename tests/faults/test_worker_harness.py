"""The worker harness itself: a job that raises fails the test, even when the worker exits 0,
and a job RQ files as abandoned fails it unless its worker is one the test killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings

from tests.processes import ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def test_a_job_that_raises_fails_the_test_though_the_worker_exits_cleanly(workers, redis_queue):
    # A real job that raises inside the worker process: db_now takes no arguments.
    redis_queue.enqueue("control.clock.db_now", "an unexpected argument")

    with pytest.raises(
        AssertionError, match=r"(?s)RQ jobs raised:\ncontrol.clock.db_now: .*TypeError"
    ):
        workers.run_burst()

    registry = redis_queue.failed_job_registry
    for job_id in registry.get_job_ids():
        registry.remove(job_id, delete_job=True)
    workers.assert_no_failed_jobs()


def _abandon_a_job(workers, redis_queue, *, worker) -> None:
    """A job whose worker dies with SIGKILL mid-job, which RQ files as abandoned once its
    registry entry expires (the clock is moved past the expiry rather than waited for)."""
    job = redis_queue.enqueue("time.sleep", 30)
    wait_until(lambda: job.get_status(refresh=True) == "started", message="job never started")
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)
    redis_queue.started_job_registry.cleanup(timestamp=time.time() + 3600)
    assert job.id in redis_queue.failed_job_registry.get_job_ids()


def test_a_job_abandoned_by_a_worker_the_test_killed_does_not_fail_the_test(workers, redis_queue):
    _abandon_a_job(workers, redis_queue, worker=workers.start(burst=False))

    workers.assert_no_failed_jobs()


def test_a_job_abandoned_by_a_worker_the_test_did_not_kill_fails_the_test(workers, redis_queue):
    # A worker outside the harness: nothing the test knows of killed it.
    stranger = subprocess.Popen(
        [sys.executable, "manage.py", "rqworker", settings.RQ_EXECUTION_QUEUE, "-v", "0"],
        cwd=ROOT,
        env=workers.env(),
        start_new_session=True,
    )
    _abandon_a_job(workers, redis_queue, worker=stranger)

    with pytest.raises(AssertionError, match=r"RQ jobs raised:\ntime.sleep: .*AbandonedJobError"):
        workers.assert_no_failed_jobs()
    registry = redis_queue.failed_job_registry
    for job_id in registry.get_job_ids():
        registry.remove(job_id, delete_job=True)
