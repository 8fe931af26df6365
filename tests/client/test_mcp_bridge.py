"""countersign-mcp, the stdio bridge, as a desktop client runs it: a real subprocess driven
by the SDK's stdio client, forwarding to the gateway of a live server with a real token.

The bridge is the `countersign-mcp` console script `make install` puts beside this Python,
the command the README's desktop configuration names.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from asgiref.sync import async_to_sync
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from control.services import api_token_create
from runs.gateway.server import INSTRUCTIONS
from runs.models import Action
from tests.factories import make_tenant

BRIDGE = [str(Path(sys.executable).with_name("countersign-mcp"))]
# A desktop client that hears nothing back is what a hang looks like; well past a slow CI run.
PATIENCE_SECONDS = 60


def bridge(url: str, token: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=BRIDGE[0],
        args=[*BRIDGE[1:], "--url", url],
        env={"COUNTERSIGN_TOKEN": token},
    )


def tenant_token() -> str:
    _, token = api_token_create(tenant=make_tenant(), name="desktop", actor="tests")
    return token


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("era", ["legacy", "auto"])  # today's desktop clients, then 2026-07-28
def test_a_desktop_client_gets_the_gateways_tools_and_answers_through_the_bridge(
    live_server, noop_tool, read_tool, era
):
    gateway, token = live_server.url + "/mcp/", tenant_token()

    async def scenario():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
        async with http, Client(streamable_http_client(gateway, http_client=http)) as direct:
            remote = await direct.list_tools()
        with anyio.fail_after(PATIENCE_SECONDS):
            async with Client(bridge(gateway, token), mode=era) as desktop:
                listed = await desktop.list_tools()
                write = {"target": "t-1", "args": {}}
                first = await desktop.call_tool("bench.noop", write)
                again = await desktop.call_tool("bench.noop", write)
                action_id = first.structured_content["action_id"]
                status = await desktop.call_tool("countersign_status", {"action_id": action_id})
                return remote, listed, first, again, status, desktop.instructions

    remote, listed, first, again, status, instructions = async_to_sync(scenario)()

    tools = {tool.name: tool for tool in listed.tools}
    assert {"bench.noop", "bench.read", "countersign_wait"} <= set(tools)
    assert tools["bench.noop"].output_schema["required"][:2] == ["status", "message"]
    assert tools["bench.noop"].annotations.read_only_hint is False
    assert tools["countersign_wait"].input_schema["required"] == ["action_id"]
    assert [tool.model_dump() for tool in listed.tools] == [
        tool.model_dump() for tool in remote.tools
    ]
    assert instructions == INSTRUCTIONS
    assert not first.is_error
    assert first.structured_content["status"] == "pending_approval"
    assert first.structured_content["intent_digest"].startswith("sha256:")
    assert again.structured_content == first.structured_content
    (action,) = Action.objects.all()
    assert str(action.pk) == first.structured_content["action_id"]
    assert (action.tool, action.target, action.status) == ("bench.noop", "t-1", "waiting_approval")
    assert status.structured_content["action_id"] == str(action.pk)
    assert status.structured_content["status"] == "pending_approval"


def refusal(url: str, token: str, tmp_path) -> tuple[MCPError, str]:
    """The error a desktop client gets listing the bridge's tools, and the bridge's stderr."""
    log = tmp_path / "stderr"

    async def scenario():
        with log.open("w") as stderr, anyio.fail_after(PATIENCE_SECONDS):
            async with Client(stdio_client(bridge(url, token), errlog=stderr)) as desktop:
                with pytest.raises(MCPError) as refused:
                    await desktop.list_tools()
        return refused.value

    return async_to_sync(scenario)(), log.read_text()


@pytest.mark.django_db(transaction=True)
def test_a_wrong_token_is_a_clear_error_on_stderr_and_to_the_client(live_server, tmp_path):
    tenant_token()  # a tenant with a token exists; this is not it
    url = live_server.url + "/mcp/"

    error, stderr = refusal(url, "cs_not-the-token", tmp_path)

    said = f"Countersign at {url} refused the token (401): check COUNTERSIGN_TOKEN"
    assert error.message == said
    assert f"countersign-mcp: {said}\n" in stderr


def test_an_unreachable_countersign_is_a_clear_error_not_a_hang(tmp_path):
    with socket.socket() as free:  # a port nothing listens on once it is closed
        free.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{free.getsockname()[1]}/mcp/"

    error, stderr = refusal(url, "cs_some-token", tmp_path)

    said = f"Countersign at {url} cannot be reached"
    assert error.message.startswith(said)
    assert f"countersign-mcp: {said}" in stderr


def test_without_countersign_token_it_exits_at_once_with_one_line_saying_so():
    env = {name: value for name, value in os.environ.items() if name != "COUNTERSIGN_TOKEN"}

    exited = subprocess.run(
        [*BRIDGE, "--url", "http://127.0.0.1:9/mcp/"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECONDS,
    )

    assert exited.returncode != 0
    assert exited.stdout == ""
    assert exited.stderr.splitlines() == [
        "countersign-mcp: set COUNTERSIGN_TOKEN to a tenant API token (never an argument)"
    ]
