"""Shared fixtures for the whole suite: real worker processes, the sandbox over HTTP, Redis,
and the bench's no-op and read tools (and a no-op that cannot be queried) registered for
one test."""

from __future__ import annotations

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
