"""No error carries a connector's secret, in any encoding, or its upstream's address: not the
attempt row, not the action's last_error, not the reconciliation case, not the API's answer,
not the MCP gateway's. The upstream here echoes the secret back in its error body, and the
secret is in the base URL the HTTP library's own messages quote."""

from __future__ import annotations

import json

import pytest

from control.services import api_token_create
from reconciliation.services import case_open
from runs.execution.worker import process_action
from runs.gateway.sessions import Caller
from runs.models import Attempt
from runs.services import lease_claim
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.gateway.conftest import BASE_URL, call
from tests.registry import connector_tools, registered
from tests.tools.upstream import (
    ECHO_CONNECTOR,
    ENCODINGS,
    echo_environ,
    echoing,
    leaks,
    recording_server,
)

pytestmark = pytest.mark.django_db
WORKER = "redaction-worker"


def dropping(out, request_line: str) -> None:
    """Reads the request, then hangs up without a word: the write's outcome is unknown."""
    raise ConnectionResetError


def sent_by_a_worker(server, tmp_path, client) -> tuple:
    """The echo connector's write, proposed, approved and sent by a worker (in process):
    the action, and each place its error is stored or shown, as text."""
    write, _ = connector_tools(tmp_path, ECHO_CONNECTOR, environ=echo_environ(server))
    tenant = make_tenant()
    _, raw_token = api_token_create(tenant=tenant, name="agent", actor="tests")
    with registered(write):
        action = make_action(make_run(tenant), tool=write.name, target="t-1", args={})
        approve(action, make_user(tenant, "operator"))
        lease = lease_claim(run_id=action.run_id, owner=WORKER)
        process_action(action_pk=action.pk, lease=lease, worker=WORKER)
        action.refresh_from_db()
        case = case_open(action=action)
        shown = everything_shown(action, client, raw_token, tenant)
    if case is not None:
        shown["case"] = case.detail
    return action, shown


def everything_shown(action, client, raw_token: str, tenant) -> dict[str, str]:
    """Each place an error of the action is stored or shown, as text."""
    attempts = Attempt.objects.filter(action=action)
    api = client.get(f"/api/v1/actions/{action.pk}", HTTP_AUTHORIZATION=f"Bearer {raw_token}")
    assert api.status_code == 200
    token, _ = api_token_create(tenant=tenant, name=f"mcp-{action.pk}", actor="tests")
    caller = Caller(token=token, session_key="s", client_name="tests", base_url=BASE_URL)
    status = call(caller, "countersign_status", {"action_id": str(action.pk)})
    return {
        "attempts": " ".join(attempt.error for attempt in attempts),
        "last_error": action.last_error,
        "api": api.content.decode(),
        "mcp": json.dumps(status.structured_content) + str(status.content),
    }


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_an_echoed_secret_and_the_upstreams_address_reach_no_stored_or_shown_error(
    client, tmp_path, encoding
):
    with recording_server() as server:
        server.answer = echoing(400, encoding, server)
        action, shown = sent_by_a_worker(server, tmp_path, client)
        assert server.request_lines, "the write was sent"
        assert action.status == "failed"
        assert "HTTP 400" in shown["last_error"]
        assert {place: leaks(text, server) for place, text in shown.items()} == {
            place: [] for place in shown
        }


def test_a_dropped_connection_names_neither_the_secret_in_the_url_nor_the_host(client, tmp_path):
    with recording_server() as server:
        server.answer = dropping
        action, shown = sent_by_a_worker(server, tmp_path, client)
        assert action.status == "uncertain"
        assert "case" in shown
        assert "failed after sending" in shown["attempts"]
        assert {place: leaks(text, server) for place, text in shown.items()} == {
            place: [] for place in shown
        }
