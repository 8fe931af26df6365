"""`manage.py worker_health`, the compose worker's healthcheck, against a real RQ worker."""

from __future__ import annotations

import socket

import pytest
from django.core.management import CommandError, call_command
from rq.worker import Worker

from tests.processes import Workers, wait_until

pytestmark = pytest.mark.django_db


def test_worker_health_fails_when_no_worker_of_this_host_is_registered(redis_queue):
    with pytest.raises(CommandError, match=f"no RQ worker of host {socket.gethostname()}"):
        call_command("worker_health")


def test_worker_health_passes_while_a_real_worker_listens(redis_queue, capsys):
    # The worker never calls the sandbox here: it only has to register and wait for jobs.
    workers = Workers(sandbox_url="http://127.0.0.1:9/sandbox/")
    try:
        workers.start(burst=False)
        wait_until(
            lambda: Worker.all(queue=redis_queue),
            message="the RQ worker never registered in Redis",
        )

        call_command("worker_health")
    finally:
        workers.stop_all()

    assert capsys.readouterr().out.startswith("ok: ")
