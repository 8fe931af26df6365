"""Worker and web processes for the benchmark and the soak: started, measured, stopped.

Every child gets explicit database and Redis URLs taken from this process's own settings,
so the benchmark measures exactly the databases it seeded (in tests: the test databases).
Children run under bench.settings, which adds the `bench.noop` tool to the settings this
process was started with.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from django.conf import settings
from django.db import connections

ROOT = Path(__file__).resolve().parents[1]
WORKER_CLASS = "rq.worker.SimpleWorker"


def database_url(alias: str) -> str:
    conf = connections[alias].settings_dict
    user = conf["USER"] or ""
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    host = conf["HOST"] or "127.0.0.1"
    port = conf["PORT"] or 5432
    return f"postgres://{user}{password}@{host}:{port}/{conf['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "COUNTERSIGN_BENCH_BASE_SETTINGS": os.environ.get("COUNTERSIGN_BENCH_BASE_SETTINGS")
        or settings.SETTINGS_MODULE
        or os.environ["DJANGO_SETTINGS_MODULE"],
        "DATABASE_URL": database_url("default"),
        "SANDBOX_DATABASE_URL": database_url("sandbox"),
        "REDIS_URL": settings.REDIS_URL,
        "COUNTERSIGN_SANDBOX_URL": settings.SANDBOX_URL,
        "COUNTERSIGN_LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.update(extra)
    return env


def rss_bytes(pid: int) -> int:
    """Resident set size of a live process, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no VmRSS for {pid}")


def peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no VmHWM for {pid}")


class Children:
    """Child processes that never outlive their owner (each in its own process group)."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []
        self.logs: dict[int, IO[bytes]] = {}

    def start(self, command: list[str], **env: str) -> subprocess.Popen:
        # stderr goes to a file, never a pipe: a chatty child (runserver logs every request)
        # would fill an unread pipe and block, holding its threads and their connections.
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop(), when the child ends)
        process = subprocess.Popen(
            [sys.executable, *command],
            cwd=ROOT,
            env=child_env(**env),
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        self.logs[process.pid] = log
        self.processes.append(process)
        return process

    def start_worker(self, *, burst: bool = False, **env: str) -> subprocess.Popen:
        command = [
            "manage.py",
            "rqworker",
            settings.RQ_EXECUTION_QUEUE,
            "--worker-class",
            WORKER_CLASS,
            "-v",
            "0",
        ]
        if burst:
            command.append("--burst")
        return self.start(command, **env)

    def stop(self, process: subprocess.Popen, *, timeout: float = 15) -> str:
        """Warm shutdown (SIGTERM: RQ finishes the job at hand), then SIGKILL; returns stderr."""
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill(process)
        errors = ""
        log = self.logs.pop(process.pid, None)
        if log is not None:
            log.seek(0)
            errors = log.read().decode(errors="replace")
            log.close()
        if process in self.processes:
            self.processes.remove(process)
        return errors

    def kill(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def stop_all(self) -> None:
        for process in list(self.processes):
            self.stop(process, timeout=5)


def wait_for(predicate, *, timeout: float, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout:g}s")
