"""The worker harness itself: a job that raises fails the test, even when the worker exits 0."""

from __future__ import annotations

import pytest

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
