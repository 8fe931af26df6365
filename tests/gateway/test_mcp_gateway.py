"""The MCP gateway's tools through the SDK's own client, in process: the catalog as MCP
shows it, a read run at once and recorded, a write frozen and answered at once (never
executed in the gateway), the same call again the same intent, countersign_wait's outcomes,
and bad calls refused with a precise message and nothing written."""

from __future__ import annotations

import jsonschema

from control.services import api_token_create
from runs.gateway.outcomes import OUTCOME_SCHEMA
from runs.gateway.sessions import Caller
from runs.models import Action, McpSession, Observation, Run
from tests.api.support import execute_with_receipt, make_uncertain_with_case
from tests.factories import approve, expire, make_policy, make_tenant, make_user, reject
from tests.gateway.conftest import BASE_URL, call, over_mcp


def test_tools_list_shows_the_catalog_with_schemas_hints_and_the_gateway_tools(
    caller, counted_write, read_tool
):
    listed = {tool.name: tool for tool in over_mcp(caller, lambda c: c.list_tools()).tools}

    assert {"counted.write", "bench.read", "ticket.close"} <= set(listed)
    assert {"countersign_wait", "countersign_status", "countersign_start_run"} <= set(listed)
    write, read = listed["counted.write"], listed["bench.read"]
    assert write.input_schema["properties"]["target"] == counted_write.target_schema
    assert write.input_schema["properties"]["args"]["properties"] == {
        "n": {"type": "integer", "minimum": 0}
    }
    assert "$schema" not in write.input_schema["properties"]["args"]
    assert write.input_schema["additionalProperties"] is False
    assert "action_id" in write.input_schema["properties"]
    assert write.output_schema == OUTCOME_SCHEMA
    assert (write.annotations.read_only_hint, write.annotations.destructive_hint) == (False, True)
    assert write.annotations.idempotent_hint is False
    assert read.annotations.read_only_hint is True
    assert read.output_schema is None
    assert listed["ticket.close"].annotations.idempotent_hint is True
    assert "pending_approval" in write.description


def test_a_read_runs_at_once_and_is_recorded_as_an_observation_of_the_sessions_run(
    caller, read_tool
):
    result = call(caller, "bench.read", {"target": "status-page"})

    assert not result.is_error
    answer = result.structured_content
    assert answer["result"]["receipt_id"].startswith("noop_")
    observation = Observation.objects.get(pk=answer["observation_id"])
    assert (observation.source, observation.ref) == ("mcp:bench.read", "status-page")
    session = McpSession.objects.get(token=caller.token)
    assert str(session.run_id) == answer["run_id"] == str(observation.run_id)
    assert session.run.goal == "MCP session of tests"
    assert not Action.objects.exists()


def test_a_write_is_frozen_and_answered_at_once_and_never_executed_in_the_gateway(
    caller, counted_write, read_tool
):
    read = call(caller, "bench.read", {"target": "status-page"}).structured_content

    result = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 3}})

    assert not result.is_error
    envelope = result.structured_content
    jsonschema.validate(envelope, OUTCOME_SCHEMA)
    action = Action.objects.get()
    assert envelope["status"] == "pending_approval"
    assert envelope["action_id"] == str(action.pk)
    assert envelope["intent_digest"] == action.intent_digest
    assert envelope["expires_at"] == action.expires_at.isoformat()
    assert envelope["inbox_url"] == f"{BASE_URL}/inbox/#action-{action.pk}"
    assert envelope["receipt"] is None
    assert action.status == "waiting_approval"
    assert str(action.observation_id) == read["observation_id"]
    assert action.action_id.startswith("mcp-")
    assert counted_write.runs == []
    assert not action.attempts.exists()


def test_the_same_call_again_is_the_same_intent_and_after_execution_the_same_receipt(
    caller, counted_write
):
    first = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 3}})
    action = Action.objects.get()
    # With no read before it, the write rests on the request itself, said so to the approver.
    assert action.observation.source == "mcp-client"
    respelled = call(caller, "counted.write", {"target": " deploy-7", "args": {"n": 3}})
    assert respelled.structured_content == first.structured_content

    approve(action, make_user(caller.token.tenant, "operator"))
    execute_with_receipt(action, receipt_id="rcpt-deploy-7")
    again = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 3}})

    assert again.structured_content["status"] == "executed"
    assert again.structured_content["receipt"]["receipt_id"] == "rcpt-deploy-7"
    assert Action.objects.count() == 1
    assert counted_write.runs == []


def test_a_second_write_while_one_is_open_is_refused_naming_the_open_one(caller, counted_write):
    first = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 3}})

    refused = call(caller, "counted.write", {"target": "deploy-8", "args": {"n": 3}})

    assert refused.is_error
    text = refused.content[0].text
    assert first.structured_content["action_id"] in text
    assert "countersign_wait" in text
    assert Action.objects.count() == 1


def test_countersign_wait_returns_each_outcome(caller, counted_write):
    tenant = caller.token.tenant
    operator = make_user(tenant, "operator")

    def propose(target: str) -> Action:
        envelope = call(caller, "counted.write", {"target": target, "args": {}})
        return Action.objects.get(pk=envelope.structured_content["action_id"])

    def wait(action: Action) -> dict:
        arguments = {"action_id": str(action.pk), "timeout_s": 0}
        result = call(caller, "countersign_wait", arguments).structured_content
        jsonschema.validate(result, OUTCOME_SCHEMA)
        return result

    pending = propose("deploy-1")
    assert wait(pending)["status"] == "still_pending"
    assert call(caller, "countersign_status", {"action_id": str(pending.pk)}).structured_content[
        "status"
    ] == ("pending_approval")
    reject(pending, operator, reason="not during the freeze")
    rejected = wait(pending)
    assert (rejected["status"], rejected["reason"]) == ("rejected", "not during the freeze")

    executed = propose("deploy-2")
    approve(executed, operator)
    execute_with_receipt(executed, receipt_id="rcpt-2")
    assert wait(executed)["receipt"]["receipt_id"] == "rcpt-2"

    make_policy(tenant, "counted.write", approval_seconds=1)
    lapsed = propose("deploy-4")
    expire(lapsed)
    assert wait(lapsed)["status"] == "expired"

    doubtful = propose("deploy-3")
    approve(doubtful, operator)
    case = make_uncertain_with_case(doubtful)
    uncertain = wait(doubtful)
    assert uncertain["status"] == "uncertain"
    assert uncertain["case_url"] == f"{BASE_URL}/reconciliation/{case.pk}/"
    assert counted_write.runs == []


def test_start_run_gives_the_session_a_new_run_and_a_bad_deadline_is_refused(caller, read_tool):
    call(caller, "bench.read", {"target": "status-page"})
    before = McpSession.objects.get().run_id

    refused = call(caller, "countersign_start_run", {"goal": "ship", "deadline": "tomorrow"})
    assert refused.is_error
    assert "ISO 8601" in refused.content[0].text
    assert McpSession.objects.get().run_id == before

    started = call(caller, "countersign_start_run", {"goal": "Ship release 7", "budget": 5})
    run = Run.objects.get(pk=started.structured_content["run_id"])
    assert (run.goal, run.budget_limit) == ("Ship release 7", 5)
    assert McpSession.objects.get().run_id == run.pk != before
    assert started.structured_content["run_url"] == f"{BASE_URL}/runs/{run.pk}/"


def test_bad_calls_are_refused_with_a_precise_message_and_write_nothing(caller, counted_write):
    refusals = {
        "no tool 'counted.wrte' here": ("counted.wrte", {"target": "deploy-7"}),
        "target is required": ("counted.write", {"args": {}}),
        "args must be an object": ("counted.write", {"target": "deploy-7", "args": [1]}),
        "unknown argument 'n'": ("counted.write", {"target": "deploy-7", "n": 3}),
        "args.n": ("counted.write", {"target": "deploy-7", "args": {"n": -1}}),
        "target": ("counted.write", {"target": "Deploy 7!", "args": {}}),
        "action_id is required": ("countersign_wait", {"timeout_s": 1}),
        "no action": ("countersign_status", {"action_id": "not-an-action"}),
        "reserved": ("counted.write", {"target": "deploy-7", "action_id": "undo-deploy"}),
    }
    for expected, (tool, arguments) in refusals.items():
        result = call(caller, tool, arguments)
        assert result.is_error, (tool, arguments)
        assert expected in result.content[0].text, (expected, result.content[0].text)
    assert not Action.objects.exists()
    assert counted_write.runs == []


def test_another_tenants_action_is_not_found(caller, counted_write):
    envelope = call(caller, "counted.write", {"target": "deploy-7", "args": {}})
    other_token, _ = api_token_create(tenant=make_tenant(), name="other", actor="tests")
    other = Caller(token=other_token, session_key="token", client_name="", base_url=BASE_URL)

    result = call(
        other, "countersign_status", {"action_id": envelope.structured_content["action_id"]}
    )

    assert result.is_error
    assert "no action" in result.content[0].text
