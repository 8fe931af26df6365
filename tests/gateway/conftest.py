"""The MCP gateway through the official SDK's client, in process: a tenant token's Caller,
and a write tool that counts every time its body runs (it must never run in the gateway)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar

import pytest
from asgiref.sync import async_to_sync
from mcp import Client

from bench.tools import BenchNoop
from control.services import api_token_create
from runs.gateway.server import build_server
from runs.gateway.sessions import Caller
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from tests.factories import make_tenant
from tests.registry import registered

BASE_URL = "http://countersign.test"


class CountedWrite(BenchNoop):
    """A write needing approval whose body counts its runs."""

    name = "counted.write"
    description = "Counts every time its body runs."
    effect_class = "not_retriable"
    dedupes_by_key = False
    retry_after_uncertain_allowed = False
    runs: ClassVar[list[str]] = []

    def execute(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        type(self).runs.append(call.idempotency_key)
        return super().execute(call, timeout=timeout)


@pytest.fixture
def counted_write() -> Iterator[CountedWrite]:
    CountedWrite.runs.clear()
    with registered(CountedWrite()) as tool:
        yield tool


@pytest.fixture
def caller(db) -> Caller:
    token, _ = api_token_create(tenant=make_tenant(), name="desktop", actor="tests")
    return Caller(token=token, session_key="client:tests", client_name="tests", base_url=BASE_URL)


def over_mcp(caller: Caller, scenario: Callable[[Client], Awaitable[Any]]) -> Any:
    """Runs `scenario` with an SDK client connected in process to the caller's server; its
    database work comes back to this thread (the test's transaction)."""

    async def connected() -> Any:
        async with Client(build_server(caller)) as client:
            return await scenario(client)

    return async_to_sync(connected)()


def call(caller: Caller, tool: str, arguments: dict[str, Any]):
    """One tools/call in its own connection: the CallToolResult."""
    return over_mcp(caller, lambda client: client.call_tool(tool, arguments))
