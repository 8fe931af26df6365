"""Shared fixtures for the whole suite: real worker processes, the sandbox over HTTP, Redis,
and the bench's no-op and read tools (and a no-op that cannot be queried) registered for
one test. And the `processes` marker, put on each test that starts a server, a worker,
Chromium or the demo (`make test-quick` runs the others)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from runs.execution.sweep_steps import STEPS
from runs.services.definitions import forget_confirmed_definitions
from tests.git_upstream import GIT_CONNECTOR
from tests.migrating import latest_schema_after
from tests.processes import connector_workers, redis_queue, sandbox, workers
from tests.registry import blind_tool, noop_tool, read_tool, unsent_tool

__all__ = [
    "blind_tool",
    "latest_schema_after",
    "noop_tool",
    "read_tool",
    "redis_queue",
    "sandbox",
    "unsent_tool",
    "workers",
]


# Fixtures that start a server (the live server, where the sandbox answers), worker
# processes, or Chromium (the browser tests' page).
PROCESS_FIXTURES = frozenset(
    {"live_server", "sandbox", "workers", "git_workers", "page", "browser"}
)
# A module that names one of these starts processes itself (the demo, gunicorn, a worker,
# an MCP server, a second pytest, ...).
PROCESS_WORDS = ("subprocess", "Popen", "connector_workers", "multiprocessing")


@cache
def _starts_processes(path: Path) -> bool:
    source = path.read_text()
    return any(word in source for word in PROCESS_WORDS)


def pytest_collection_modifyitems(config, items):
    marker = pytest.mark.processes
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & PROCESS_FIXTURES or _starts_processes(Path(item.path)):
            item.add_marker(marker)


@pytest.fixture(autouse=True)
def _definitions_confirmed_afresh():
    """Each test's database starts without frozen tool definitions (they roll back with it),
    so no process memory may say they were confirmed: query counts stay the same in any order."""
    forget_confirmed_definitions()


@pytest.fixture
def git_workers(redis_queue, tmp_path, settings, monkeypatch):
    """Worker processes, and this process, that know the git connector (mcp-server-git over
    stdio); no sandbox."""
    with connector_workers(GIT_CONNECTOR, tmp_path, settings, monkeypatch) as pool:
        yield pool


@pytest.fixture(autouse=True)
def _sweep_steps_afresh():
    """No sweep step carries a backoff from another test's failure into this one."""
    STEPS.failing.clear()
