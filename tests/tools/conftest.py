"""Fixtures for the tool adapters: a sandbox over live HTTP, or no sandbox at all."""

from __future__ import annotations

import socket

import pytest

from sandbox.services import sandbox_reset


@pytest.fixture
def sandbox_url(live_server, settings) -> str:
    """A freshly reset sandbox served by live_server, where the adapters look for it.

    Needs @pytest.mark.django_db(transaction=True, databases=["default", "sandbox"]).
    """
    sandbox_reset()
    settings.SANDBOX_URL = live_server.url + "/sandbox/"
    return settings.SANDBOX_URL


@pytest.fixture
def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def unreachable_sandbox(settings, closed_port) -> str:
    """SANDBOX_URL pointing where connections are refused: nothing can be sent."""
    settings.SANDBOX_URL = f"http://127.0.0.1:{closed_port}/sandbox/"
    return settings.SANDBOX_URL
