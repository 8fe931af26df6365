"""Tools registered for one test only: the bench's no-op and read, or a tool a test declares."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from bench.tools import BenchNoop, BenchRead
from control.models import Tenant
from runs.tools.base import Tool
from runs.tools.connectors.files import load_files
from runs.tools.registry import register_tool, unregister_tool
from tests.factories import enable_connectors


@contextlib.contextmanager
def registered(tool: Tool) -> Iterator[Tool]:
    """`tool` is in this process's registry for the block, and gone after it; worker
    processes the test starts do not have it. Its connector is enabled for the tenants that
    already exist (tests.factories.make_tenant enables it for those made later)."""
    register_tool(tool)
    _enable_for_existing_tenants(tool.connector)
    try:
        yield tool
    finally:
        unregister_tool(tool)


def _enable_for_existing_tenants(connector: str) -> None:
    try:
        tenants = list(Tenant.objects.all())
    except RuntimeError:
        return  # pytest-django: this test (or this fixture, so far) has no database
    for tenant in tenants:
        enable_connectors(tenant, connector)


def connector_tools(
    directory: Path, text: str, *, environ: Mapping[str, str] | None = None
) -> list[Tool]:
    """The tools a connector file holding text defines (written into directory)."""
    path = directory / "connectors.toml"
    path.write_text(text)
    return load_files([str(path)], environ=environ or {})


@pytest.fixture
def noop_tool() -> Iterator[Tool]:
    with registered(BenchNoop()) as tool:
        yield tool


class BlindNoop(BenchNoop):
    """The no-op on a system that cannot be asked what it did (no query by key): a send
    whose outcome is unknown stays in doubt until a person decides."""

    name = "blind.noop"
    description = "Does nothing, once per key; cannot be queried by key."
    queryable_by_key = False


@pytest.fixture
def blind_tool() -> Iterator[Tool]:
    with registered(BlindNoop()) as tool:
        yield tool


class UnsentNoop(BenchNoop):
    """The no-op on a system that never received the send: asked by the key, it holds
    nothing under it, so a write waiting to go again may end as never sent."""

    name = "unsent.noop"
    description = "Does nothing; asked by key, it holds nothing."

    def query(self, idempotency_key: str, *, timeout, intent_digest: str | None = None):
        return None


@pytest.fixture
def unsent_tool() -> Iterator[Tool]:
    with registered(UnsentNoop()) as tool:
        yield tool


@pytest.fixture
def read_tool() -> Iterator[Tool]:
    with registered(BenchRead()) as tool:
        yield tool
