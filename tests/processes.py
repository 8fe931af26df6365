"""Real processes for the tests that need them: RQ workers as subprocesses against the test
databases, the sandbox served over HTTP by pytest-django's live server, Redis db 15."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import django_rq
import pytest
import requests
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections
from rq.job import Job

ROOT = Path(__file__).resolve().parents[1]
WORKER_LEASE_SECONDS = 2


def _database_url(alias: str) -> str:
    """The URL of the test database `alias` names, for the processes a test starts."""
    conf = connections[alias].settings_dict
    if connections[alias].vendor == "sqlite":
        return f"sqlite:///{conf['NAME']}"
    return f"postgres://{conf['USER']}@{conf['HOST']}:{conf['PORT']}/{conf['NAME']}"


@pytest.fixture
def sandbox(live_server, settings):
    """The sandbox's base URL; the test process's own adapters use it too."""
    settings.SANDBOX_URL = live_server.url + "/sandbox/"
    call_command("sandbox_reset", verbosity=0)
    requests.delete(settings.SANDBOX_URL + "faults", timeout=5).raise_for_status()
    return settings.SANDBOX_URL


@pytest.fixture
def redis_queue():
    queue = django_rq.get_queue(settings.RQ_EXECUTION_QUEUE)
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


class Workers:
    """Starts RQ worker processes and guarantees none outlives the test."""

    def __init__(self, sandbox_url: str) -> None:
        self.sandbox_url = sandbox_url
        # Short, so an orphan's lease runs out within a test; a test that expires leases
        # itself may lengthen it, so a worker stalled on a busy machine keeps its own.
        self.lease_seconds = WORKER_LEASE_SECONDS
        self.processes: list[subprocess.Popen] = []
        # The RQ worker processes' names (a test may add other processes to stop, unnamed).
        self.names: dict[subprocess.Popen, str] = {}

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": _database_url("default"),
            "SANDBOX_DATABASE_URL": _database_url("sandbox"),
            "COUNTERSIGN_SANDBOX_URL": self.sandbox_url,
            "REDIS_URL": settings.REDIS_URL,
            "COUNTERSIGN_LEASE_SECONDS": str(self.lease_seconds),
            "COUNTERSIGN_LOG_LEVEL": "WARNING",
        }
        env.update(extra)
        return env

    def start(self, *, fault_point: str = "", burst: bool = True) -> subprocess.Popen:
        name = f"test-worker-{uuid.uuid4().hex}"
        command = [
            sys.executable,
            "manage.py",
            "rqworker",
            settings.RQ_EXECUTION_QUEUE,
            "--worker-class",
            "rq.worker.SimpleWorker",
            "--name",
            name,
            "-v",
            "0",
        ]
        if burst:
            command.append("--burst")
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env(COUNTERSIGN_FAULT_POINT=fault_point),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        self.names[process] = name
        return process

    def run_burst(self, *, fault_point: str = "", timeout: float = 60) -> int:
        process = self.start(fault_point=fault_point)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            output = process.stdout.read().decode(errors="replace")
            raise AssertionError(f"worker did not finish in {timeout}s:\n{output}") from None
        self.last_output = self.output(process)
        self.assert_no_failed_jobs()
        return process.returncode

    def assert_no_failed_jobs(self) -> None:
        """A job that raised is a bug even when the worker exits 0: RQ only files it in the
        failed-job registry. Every test that drives a worker fails on one.

        The one exception is a job RQ filed as abandoned because its worker is one this test
        killed with SIGKILL: the kill was the test's own doing, and what it left behind is the
        lease sweep's to recover, which the test asserts on its own terms."""
        queue = django_rq.get_queue(settings.RQ_EXECUTION_QUEUE)
        killed = {name for process, name in self.names.items() if process.poll() == -signal.SIGKILL}
        failures = []
        for job in Job.fetch_many(queue.failed_job_registry.get_job_ids(), queue.connection):
            if job is None:
                continue
            result = job.latest_result()
            reason = result.exc_string if result else "no result"
            if job.worker_name in killed and "AbandonedJobError" in reason:
                continue
            failures.append(f"{job.func_name}: {reason}")
        if failures:
            raise AssertionError("RQ jobs raised:\n" + "\n".join(failures))

    def output(self, process: subprocess.Popen) -> str:
        return process.stdout.read().decode(errors="replace") if process.stdout else ""

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            if process.stdout:
                process.stdout.close()


@pytest.fixture
def workers(sandbox, redis_queue):
    pool = Workers(sandbox)
    yield pool
    pool.stop_all()
    pool.assert_no_failed_jobs()


@contextlib.contextmanager
def connector_workers(text: str, directory: Path, test_settings, monkeypatch):
    """Worker processes, and this process, that know the connector file holding text (no
    sandbox); the block's end stops them and checks that no job failed."""
    path = directory / "connectors.toml"
    path.write_text(text)
    test_settings.COUNTERSIGN_CONNECTORS = [str(path)]
    monkeypatch.setenv("COUNTERSIGN_CONNECTORS", str(path))
    pool = Workers(sandbox_url="http://127.0.0.1:9/sandbox/")
    try:
        yield pool
    finally:
        pool.stop_all()
    pool.assert_no_failed_jobs()


def wait_until(predicate, *, timeout: float = 30, interval: float = 0.05, message: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(message or f"condition not met within {timeout}s")


def settled(workers: Workers, action, *, timeout: float = 30):
    """Sweeps and runs a worker burst until `action` is out of the worker's hands (not
    approved, waiting to retry or in flight); returns it, refreshed."""

    def done() -> bool:
        call_command("sweep", verbosity=0)
        assert workers.run_burst() == 0
        action.refresh_from_db()
        return action.status not in ("approved", "retry_wait", "in_flight")

    wait_until(done, timeout=timeout, interval=0.2)
    return action


def leases_expire(*run_ids) -> None:
    """The database clock passes these runs' leases, as it would a dead worker's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_lease SET expires_at = now() - interval '1 second' WHERE run_id = ANY(%s)",
            [[str(run_id) for run_id in run_ids]],
        )
