"""An MCP agent across sessions, over real HTTP with the official SDK's client: a token plus
the client's name is one agent; the same write repeated by it in a new session is the same
intent (its status, then its receipt once a real worker executed it), never a second
request for approval. Another client name or another token is another agent."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from control.services import api_token_create
from runs.models import Action, McpAgent, McpSession
from sandbox.models import Effect
from tests.factories import approve, make_tenant, make_user
from tests.mcp_client import over_http

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

CLOSE = {"target": "ticket-7", "args": {"resolution": "fixed"}}


def close_ticket(live_server, secret: str, client_name: str, arguments=CLOSE) -> dict:
    """One connection of a handshake-era client (a new Mcp-Session-Id each time): one write."""

    async def scenario(mcp):
        result = await mcp.call_tool("ticket.close", arguments)
        assert not result.is_error, result.content[0].text
        return result.structured_content

    url = live_server.url + "/mcp/"
    return over_http(url, secret, scenario, mode="legacy", client_name=client_name)


def test_a_reconnected_agent_repeating_a_write_gets_the_same_intent_then_its_receipt(
    live_server, workers
):
    tenant = make_tenant()
    _, secret = api_token_create(tenant=tenant, name="desktop", actor="tests")

    first = close_ticket(live_server, secret, "Desktop")
    second = close_ticket(live_server, secret, "Desktop", {**CLOSE, "target": " ticket-7"})

    assert McpSession.objects.filter(client_name="Desktop").count() == 2
    assert (second["action_id"], second["intent_digest"]) == (
        first["action_id"],
        first["intent_digest"],
    )
    assert second["status"] == "pending_approval"
    assert Action.objects.filter(status="waiting_approval").count() == 1
    action = Action.objects.get()

    approve(action, make_user(tenant, "operator"))
    assert workers.run_burst() == 0
    action.refresh_from_db()
    assert action.status == "succeeded"
    third = close_ticket(live_server, secret, "Desktop")

    assert third["status"] == "executed"
    assert third["action_id"] == str(action.pk)
    assert third["receipt"]["receipt_id"] == action.receipt.receipt_id
    assert Action.objects.count() == 1
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1


def test_another_client_name_or_another_token_is_another_agent(live_server, sandbox):
    tenant = make_tenant()
    _, secret = api_token_create(tenant=tenant, name="desktop", actor="tests")
    _, other_secret = api_token_create(tenant=tenant, name="laptop", actor="tests")

    desktop = close_ticket(live_server, secret, "Desktop")
    editor = close_ticket(live_server, secret, "Editor")
    laptop = close_ticket(live_server, other_secret, "Desktop")

    assert len({desktop["action_id"], editor["action_id"], laptop["action_id"]}) == 3
    assert desktop["intent_digest"] == editor["intent_digest"] == laptop["intent_digest"]
    assert Action.objects.filter(status="waiting_approval").count() == 3


def test_a_write_waits_for_its_agents_lock_so_two_sessions_at_once_freeze_one_intent(
    live_server, sandbox
):
    tenant = make_tenant()
    _, secret = api_token_create(tenant=tenant, name="desktop", actor="tests")
    close_ticket(live_server, secret, "Desktop", {**CLOSE, "target": "ticket-8"})
    agent = McpAgent.objects.get(client_name="Desktop")
    holding, release = threading.Event(), threading.Event()

    def hold_the_agents_lock() -> None:
        try:
            with transaction.atomic():
                McpAgent.objects.select_for_update().get(pk=agent.pk)
                holding.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=3) as pool:
        holder = pool.submit(hold_the_agents_lock)
        assert holding.wait(timeout=10)
        writes = [pool.submit(close_ticket, live_server, secret, "Desktop") for _ in range(2)]
        time.sleep(1.5)
        # Both sessions got as far as the agent's lock, and no further.
        assert Action.objects.filter(target="ticket-7").count() == 0
        release.set()
        holder.result()
        answers = [write.result() for write in writes]

    assert answers[0]["action_id"] == answers[1]["action_id"]
    assert Action.objects.filter(target="ticket-7").count() == 1
