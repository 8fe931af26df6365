"""/mcp/ over real HTTP against the live server, with the SDK's Streamable HTTP client: the
bearer token, what else the endpoint answers, and one run per MCP session for handshake-era
and sessionless clients alike."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from django.urls import reverse

from control.services import api_token_create, api_token_revoke
from runs.models import McpSession
from tests.factories import make_tenant, make_user
from tests.mcp_client import over_http
from tests.test_front_door import welcome

pytestmark = pytest.mark.django_db(transaction=True)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "Desktop", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def token():
    return api_token_create(tenant=make_tenant(), name="desktop", actor="tests")


def test_a_request_without_a_valid_token_is_401_and_opens_nothing(live_server, token):
    row, _ = token
    url = live_server.url + "/mcp/"
    missing = requests.post(url, json=INITIALIZE, headers=ACCEPT, timeout=10)
    wrong = requests.post(
        url, json=INITIALIZE, headers={**ACCEPT, "Authorization": "Bearer cs_nope"}, timeout=10
    )
    api_token_revoke(tenant=row.tenant, name=row.name, actor="tests")
    revoked = requests.post(
        url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {token[1]}"}, timeout=10
    )

    for answer in (missing, wrong, revoked):
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="countersign"'
        assert "Authorization: Bearer" in answer.json()["detail"]
        assert "Mcp-Session-Id" not in answer.headers
    assert not McpSession.objects.exists()


def test_a_handshake_gets_a_session_id_and_a_get_stream_is_405(live_server, token):
    headers = {**ACCEPT, "Authorization": f"Bearer {token[1]}"}
    url = live_server.url + "/mcp/"

    answer = requests.post(url, json=INITIALIZE, headers=headers, timeout=10)
    stream = requests.get(url, headers=headers, timeout=10)

    assert answer.status_code == 200
    assert answer.json()["result"]["serverInfo"]["name"] == "countersign"
    session = McpSession.objects.get()
    assert session.key == "session:" + answer.headers["Mcp-Session-Id"]
    assert (session.client_name, session.run) == ("Desktop", None)
    assert (stream.status_code, stream.headers["Allow"]) == (405, "POST")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_each_mcp_session_has_its_own_run_and_the_run_page_shows_it(
    live_server, token, read_tool, client, mode
):
    """A handshake-era client is a session per connection (its Mcp-Session-Id); a
    sessionless one is its client name, the same across connections."""
    url = live_server.url + "/mcp/"

    def read_once(client_name: str) -> str:
        async def scenario(mcp):
            result = await mcp.call_tool("bench.read", {"target": "status-page"})
            return result.structured_content["run_id"]

        return over_http(url, token[1], scenario, mode=mode, client_name=client_name)

    first, second, other = read_once("Desktop"), read_once("Desktop"), read_once("Editor")

    assert other not in {first, second}
    if mode == "legacy":
        assert first != second
        assert McpSession.objects.count() == 3
    else:
        assert first == second
        assert sorted(McpSession.objects.values_list("key", flat=True)) == [
            "client:Desktop",
            "client:Editor",
        ]
    client.force_login(make_user(token[0].tenant, "operator"))
    page = client.get(reverse("run_detail", args=[first])).content.decode()
    assert "through MCP: Desktop, token desktop" in page
    assert "MCP session of Desktop" in page


def test_the_readmes_desktop_configuration_is_what_the_demo_prints():
    """The front door's snippet and the demo's printed one have the same shape."""
    root = Path(__file__).resolve().parents[2]
    (snippet,) = re.findall(r"```json\n(.*?)```", (root / "README.md").read_text(), re.DOTALL)
    printed = json.loads(welcome.mcp_client_config(8000, "cs_..."))

    documented = json.loads(snippet)["mcpServers"]["countersign"]
    assert documented["args"] == printed["mcpServers"]["countersign"]["args"]
    assert documented["env"] == printed["mcpServers"]["countersign"]["env"]
    assert Path(printed["mcpServers"]["countersign"]["command"]).name == documented["command"]


def test_loading_the_urls_does_not_import_the_mcp_sdk():
    """Workers load the URLconf for their system checks at every start: the SDK's import
    (about 1.6 s) waits for the first MCP request instead."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, sys; django.setup(); import control.urls; "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
    )
    assert loaded.stdout.strip() == "[]"
