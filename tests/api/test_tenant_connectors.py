"""Connectors are scoped to tenants: a new tenant's agent can list, propose and read nothing
(API, MCP gateway, tools page) until a connector is enabled for it; enabling makes exactly
that connector's tools appear; a read_only tool runs without approval only where the
tenant's enablement allows reads."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client

from control.models import AuditEntry
from control.services import api_token_create
from runs.gateway.sessions import Caller
from runs.models import Action, ConnectorEnablement, Observation, Run
from runs.services import connectors_disable, connectors_enable
from tests.api.conftest import ApiClient, assert_problem
from tests.factories import make_tenant, make_user
from tests.gateway.conftest import BASE_URL, call, over_mcp

pytestmark = pytest.mark.django_db

GATEWAY_TOOLS = {"countersign_wait", "countersign_status", "countersign_start_run"}


@pytest.fixture
def fresh():
    """A tenant as `createtenant` leaves it: no connector enabled."""
    return make_tenant(connectors=False)


def agent(tenant) -> ApiClient:
    _, token = api_token_create(tenant=tenant, name="agent", actor="tests")
    return ApiClient(token, tenant)


def mcp_caller(tenant) -> Caller:
    token, _ = api_token_create(tenant=tenant, name="desktop", actor="tests")
    return Caller(token=token, session_key="client:tests", client_name="tests", base_url=BASE_URL)


def listed_over_mcp(caller: Caller) -> set[str]:
    return {tool.name for tool in over_mcp(caller, lambda c: c.list_tools()).tools}


def propose_close(api: ApiClient):
    run = api.post("/runs", {"goal": "close ticket-7"}).body
    observation = api.post(
        f"/runs/{run['id']}/observations",
        {
            "source": "ticket.lookup",
            "ref": "ticket-7",
            "content_hash": "sha256:" + "a" * 64,
            "summary": "the customer confirmed the fix",
        },
    ).body
    return api.post(
        f"/runs/{run['id']}/actions",
        {"action_id": "close-7", "tool": "ticket.close", "target": "ticket-7",
         "args": {"resolution": "fixed"}, "contract_version": "v1",
         "observation_id": observation["id"]},
    )  # fmt: skip


def test_a_new_tenants_agent_lists_proposes_and_reads_nothing(fresh, client):
    api = agent(fresh)
    assert api.get("/tools").body == []

    answer = propose_close(api)

    problem = assert_problem(answer, 422, "invalid_arguments")
    assert problem["detail"] == (
        "tool 'ticket.close' is not enabled for this tenant: connector 'ticket' is not "
        f"enabled for tenant '{fresh.name}'"
    )
    assert not Action.objects.exists()

    caller = mcp_caller(fresh)
    assert listed_over_mcp(caller) == GATEWAY_TOOLS
    for tool, arguments in (
        ("ticket.lookup", {"target": "ticket-7"}),
        ("ticket.close", {"target": "ticket-7", "args": {"resolution": "fixed"}}),
    ):
        result = call(caller, tool, arguments)
        assert result.is_error
        assert f"no tool {tool!r} here" in result.content[0].text
    assert not Action.objects.exists()
    assert not Observation.objects.filter(source__startswith="mcp:").exists()

    client.force_login(make_user(fresh, "operator"))
    page = client.get("/tools/").content.decode()
    assert "data-tool=" not in page
    assert f"connectors enable --tenant {fresh.name}" in page


def test_enabling_a_connector_shows_and_allows_exactly_its_tools(fresh):
    api = agent(fresh)
    assert connectors_enable(tenant=fresh, connectors=["ticket"], actor="admin") == ["ticket"]

    names = {tool["name"] for tool in api.get("/tools").body}
    assert names == {"ticket.lookup", "ticket.close"}
    caller = mcp_caller(fresh)
    assert listed_over_mcp(caller) == GATEWAY_TOOLS | names
    assert propose_close(api).status == 201
    refused = call(caller, "notify.send", {"target": "ops@x.example", "args": {}})
    assert refused.is_error

    connectors_disable(tenant=fresh, connectors=["ticket"], actor="admin")
    assert api.get("/tools").body == []
    verbs = AuditEntry.objects.filter(tenant=fresh).values_list("verb", "data")
    assert list(verbs.filter(verb__startswith="connectors.")) == [
        ("connectors.enable", {"connectors": ["ticket"], "reads_without_approval": False}),
        ("connectors.disable", {"connectors": ["ticket"]}),
    ]


def test_a_read_needs_a_person_unless_the_tenant_allowed_reads_without_approval(fresh):
    caller = mcp_caller(fresh)
    connectors_enable(tenant=fresh, connectors=["ticket"], actor="admin")
    lookup = next(t for t in agent(fresh).get("/tools").body if t["name"] == "ticket.lookup")
    assert lookup["needs_approval"] is True

    held = call(caller, "ticket.lookup", {"target": "ticket-7"})

    assert not held.is_error
    assert held.structured_content["status"] == "pending_approval"
    action = Action.objects.get()
    assert (action.tool, action.status, action.needs_approval) == (
        "ticket.lookup", "waiting_approval", True,
    )  # fmt: skip
    assert not action.attempts.exists()


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_a_read_allowed_without_approval_answers_at_once(fresh, sandbox):
    caller = mcp_caller(fresh)
    connectors_enable(
        tenant=fresh, connectors=["ticket"], actor="admin", reads_without_approval=True
    )
    lookup = next(t for t in agent(fresh).get("/tools").body if t["name"] == "ticket.lookup")
    assert lookup["needs_approval"] is False

    answer = call(caller, "ticket.lookup", {"target": "ticket-7"})

    assert not answer.is_error, answer.content
    assert answer.structured_content["result"]["status"] == "open"
    assert not Action.objects.exists()
    assert Observation.objects.filter(source="mcp:ticket.lookup").count() == 1
    run = Run.objects.get()
    assert run.tenant == fresh


def test_a_read_only_intent_proposed_through_the_api_waits_for_a_person_without_reads(fresh):
    api = agent(fresh)
    connectors_enable(tenant=fresh, connectors=["ticket"], actor="admin")
    run = api.post("/runs", {"goal": "look ticket-7 up"}).body
    observation = api.post(
        f"/runs/{run['id']}/observations",
        {
            "source": "agent",
            "ref": "ticket-7",
            "content_hash": "sha256:" + "b" * 64,
            "summary": "asked to look",
        },
    ).body
    proposed = api.post(
        f"/runs/{run['id']}/actions",
        {"action_id": "look-7", "tool": "ticket.lookup", "target": "ticket-7", "args": {},
         "contract_version": "v1", "observation_id": observation["id"]},
    )  # fmt: skip

    assert proposed.status == 201, proposed.body
    assert proposed.body["status"] == "waiting_approval"


def test_another_tenants_enablement_reaches_nothing_here(fresh):
    other = make_tenant()  # every connector enabled
    assert {t["name"] for t in agent(other).get("/tools").body} >= {"ticket.close"}
    assert agent(fresh).get("/tools").body == []
    response = Client().get("/api/v1/tools")
    assert response.status_code == 401


def test_an_enablement_inserted_by_sql_opens_nothing_and_verify_audit_names_it(fresh, capsys):
    """A database writer without the keys cannot give a tenant a connector."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runs_connectorenablement (tenant_id, connector, reads_without_approval,"
            " enabled_by, enabled_at, key_id, mac) VALUES (%s, 'ticket', true, 'x', now(), '', '')",
            [fresh.pk],
        )
    api = agent(fresh)

    assert api.get("/tools").body == []
    assert_problem(propose_close(api), 422, "invalid_arguments")
    assert not Action.objects.exists()
    with pytest.raises(CommandError, match="connector_enablement"):
        call_command("verify_audit")
    assert "does not verify: connector_enablement" in capsys.readouterr().err


def test_reads_without_approval_switched_on_by_sql_does_not_let_a_read_run_alone(fresh):
    connectors_enable(tenant=fresh, connectors=["ticket"], actor="admin")
    ConnectorEnablement.objects.filter(tenant=fresh).update(reads_without_approval=True)
    caller = mcp_caller(fresh)

    held = call(caller, "ticket.lookup", {"target": "ticket-7"})

    # The row no longer verifies: the connector is not enabled at all, its reads refused.
    assert held.is_error
    assert not Action.objects.exists()
    assert agent(fresh).get("/tools").body == []
