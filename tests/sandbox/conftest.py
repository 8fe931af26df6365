"""Fixtures for the sandbox's tests: a freshly reset sandbox, in-process or over live HTTP."""

from __future__ import annotations

import pytest

from sandbox.services import sandbox_reset


@pytest.fixture
def fresh_sandbox() -> None:
    """ticket-1..ticket-100 open at version 1, nothing else (transactional tests flush it)."""
    sandbox_reset()


@pytest.fixture
def sandbox_url(live_server, settings, fresh_sandbox) -> str:
    """Base URL of the sandbox served by live_server; needs a transactional two-database test."""
    settings.SANDBOX_URL = live_server.url + "/sandbox/"
    return settings.SANDBOX_URL
