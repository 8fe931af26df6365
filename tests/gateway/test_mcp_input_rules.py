"""/mcp/ applies the REST API's input rules, through the same functions: reserved action ids
(look-alikes read as a person reads them), the fields' limits, the body's size, depth and NUL
rules, and the inbox's look-alike warning. A refusal is a precise message, never database
error text, and writes nothing. Each rule is checked through the MCP client and the REST API."""

from __future__ import annotations

import pytest
from mcp import MCPError

from bench.tools import BenchRead
from control.services import api_token_create
from runs.gateway.server import INTERNAL_ERROR
from runs.models import Action, Observation
from tests.api.conftest import ApiClient, assert_problem
from tests.factories import make_observation, make_run, make_tenant, make_user
from tests.gateway.conftest import call
from tests.mcp_client import over_http
from tests.registry import registered

LOOK_ALIKES = [
    "undo-deploy",
    "UNDO-deploy",
    "undo\u2010deploy",  # a hyphen (U+2010), not a hyphen-minus
    "undo\u2212deploy",  # a minus sign
    "\uff55ndo-deploy",  # a fullwidth u
    "deploy~2",
    "deploy~\uff12",  # a fullwidth 2
    "deploy\uff5e2",  # a fullwidth tilde
    "deploy~\u0662",  # an Arabic-Indic 2
]


def _rest_proposal(api: ApiClient, **overrides):
    run = make_run(api.tenant)
    body = {
        "action_id": "close-ticket",
        "tool": "ticket.close",
        "target": "ticket-7",
        "args": {},
        "contract_version": "v1",
        "observation_id": str(make_observation(run).pk),
        **overrides,
    }
    return api.post(f"/runs/{run.pk}/actions", body)


@pytest.mark.parametrize("action_id", LOOK_ALIKES)
def test_a_reserved_id_or_its_look_alike_is_refused_over_mcp_naming_the_rule(
    caller, counted_write, action_id
):
    result = call(caller, "counted.write", {"target": "deploy-7", "action_id": action_id})

    assert result.is_error
    assert result.content[0].text.startswith(f"action_id {action_id!r} is refused: ids ")
    assert "reserved" in result.content[0].text
    assert not Action.objects.exists()


@pytest.mark.parametrize("action_id", LOOK_ALIKES)
def test_a_reserved_id_or_its_look_alike_is_refused_by_the_rest_api_naming_the_rule(db, action_id):
    tenant = make_tenant()
    _, secret = api_token_create(tenant=tenant, name="agent", actor="tests")

    answer = _rest_proposal(ApiClient(secret, tenant), action_id=action_id)

    problem = assert_problem(answer, 422, "invalid_arguments")
    assert problem["detail"].startswith(f"action_id {action_id!r} is refused: ids ")
    assert not Action.objects.exists()


OVER_LIMITS = {
    "target": ({"target": "d" * 501}, "target: String should have at most 500 characters"),
    "long id": (
        {"target": "deploy-7", "action_id": "a" * 201},
        "action_id: String should have at most 200 characters",
    ),
    "id pattern": ({"target": "deploy-7", "action_id": "has space"}, "action_id: String should"),
    "empty id": ({"target": "deploy-7", "action_id": ""}, "action_id: String should"),
    "id type": ({"target": "deploy-7", "action_id": 7}, "action_id: Input should be a valid"),
}


@pytest.mark.parametrize("case", OVER_LIMITS)
def test_the_rest_apis_field_limits_hold_over_mcp(caller, counted_write, case):
    arguments, message = OVER_LIMITS[case]
    arguments = {**arguments, "args": {}}
    result = call(caller, "counted.write", arguments)

    assert result.is_error
    assert result.content[0].text.startswith(message), result.content[0].text
    assert not Action.objects.exists()
    assert not Observation.objects.exists()

    tenant = make_tenant()
    _, secret = api_token_create(tenant=tenant, name="agent", actor="tests")
    rest = _rest_proposal(ApiClient(secret, tenant), tool="counted.write", **arguments)
    assert_problem(rest, 422, "validation_error")
    assert not Action.objects.exists()


def _deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"n": value}
    return value


@pytest.mark.django_db(transaction=True)
def test_the_rest_apis_body_rules_hold_over_mcp_with_their_words_and_write_nothing(
    live_server, counted_write
):
    tenant = make_tenant()
    _, secret = api_token_create(tenant=tenant, name="desktop", actor="tests")
    api = ApiClient(secret, tenant)
    run = make_run(tenant)
    refused = {
        "strings must not contain NUL": ({"target": "deploy\x007", "args": {}}, 422),
        "exceeds 1000000 bytes": ({"target": "deploy-7", "args": {"n": "x" * 1_000_001}}, 400),
        "nesting deeper than 32": ({"target": "deploy-7", "args": _deep(40)}, 400),
    }
    for message, (arguments, rest_status) in refused.items():

        async def scenario(mcp, arguments=arguments):
            with pytest.raises(MCPError) as raised:
                await mcp.call_tool("counted.write", arguments)
            return raised.value

        error = over_http(live_server.url + "/mcp/", secret, scenario, mode="legacy")
        assert message in str(error), (message, str(error))
        assert "Error" not in str(error)  # no IntegrityError, DataError, ValueError text
        rest = api.post(
            f"/runs/{run.pk}/actions",
            {**arguments, "action_id": "x", "tool": "counted.write", "contract_version": "v1"},
        )
        assert rest.status == rest_status
        assert message in rest.body["detail"], rest.body
    assert not Action.objects.exists()


def test_a_look_alike_target_proposed_over_mcp_is_flagged_in_the_inbox(caller, client):
    spoofed = "ops@ex\u0430mple.com"  # a Cyrillic a
    result = call(caller, "notify.send", {"target": spoofed, "args": {"body": "hello"}})
    assert not result.is_error, result.content[0].text

    client.force_login(make_user(caller.token.tenant, "operator"))
    page = client.get("/inbox/").content.decode()

    assert "Look-alike characters in the target" in page
    assert "CYRILLIC SMALL LETTER A" in page


class BrokenRead(BenchRead):
    """A read whose connector fails in a way nobody classified, with words that must stay
    on the server (an outside system's failure: the boundary, not our code)."""

    name = "broken.read"

    def fetch(self, call, *, timeout):
        raise RuntimeError("connection to 10.0.0.7 failed: password=hunter2")


@pytest.mark.django_db(transaction=True)
def test_an_unexpected_failure_reaches_the_client_as_a_generic_error_not_its_text(live_server):
    tenant = make_tenant()
    _, secret = api_token_create(tenant=tenant, name="desktop", actor="tests")

    async def scenario(mcp):
        return await mcp.call_tool("broken.read", {"target": "status-page"})

    with registered(BrokenRead()):
        result = over_http(live_server.url + "/mcp/", secret, scenario, mode="legacy")

    assert result.is_error
    assert result.content[0].text == INTERNAL_ERROR
