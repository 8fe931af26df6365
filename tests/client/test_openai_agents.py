"""`countersign_client.openai_agents` with the real OpenAI Agents SDK, offline: a scripted
model (the SDK's Model interface) calls a countersigned tool against a live Countersign; an
operator decides through the service, and the worker's own `process_action` executes the
approved intent against the sandbox over HTTP."""

from __future__ import annotations

import ast
import asyncio
import json
import re
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, Usage, function_tool, set_tracing_disabled
from django.core.management import call_command
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from reconciliation.models import ReconciliationCase
from runs.execution.worker import process_action
from runs.models import Action
from runs.services import lease_claim
from sandbox.models import Effect
from tests.client.conftest import CLIENT_DIR, LIVE
from tests.factories import approve, expire, make_policy, make_user, reject
from tests.sandbox.support import set_fault

from countersign_client import Countersign  # isort: skip
from countersign_client.openai_agents import (  # isort: skip
    CountersignGate,
    action_id_for_call,
)
from countersign_client.paused import FileStateStore  # isort: skip

set_tracing_disabled(True)


class ScriptedModel(Model):
    """First answers the scripted tool calls; once every one has its output in the input,
    answers a final message quoting those outputs. `seen_outputs` is what it read."""

    def __init__(self, calls: dict[str, dict[str, Any]], tool: str = "close_ticket") -> None:
        self.calls = calls  # call id -> arguments
        self.tool = tool
        self.seen_outputs: dict[str, str] = {}
        self.requests = 0

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        self.requests += 1
        items = input if isinstance(input, list) else []
        outputs = {
            item["call_id"]: item["output"]
            for item in items
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }
        if not outputs:
            return _response(
                ResponseFunctionToolCall(
                    id=call_id,
                    call_id=call_id,
                    type="function_call",
                    name=self.tool,
                    arguments=json.dumps(arguments),
                )
                for call_id, arguments in self.calls.items()
            )
        self.seen_outputs.update(outputs)
        text = json.dumps({call_id: outputs.get(call_id) for call_id in self.calls})
        return _response([_message(text)])

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the tests run without streaming")


def _response(output) -> ModelResponse:
    return ModelResponse(output=list(output), usage=Usage(), response_id=None)


def _message(text: str) -> ResponseOutputMessage:
    content = ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])
    return ResponseOutputMessage(
        id="msg-1", type="message", role="assistant", status="completed", content=[content]
    )


# The original tool: its body is the write the agent must never perform itself.
performed: list[str] = []


@function_tool
def close_ticket(ticket_id: str, resolution: str) -> str:
    """Close a support ticket."""
    performed.append(ticket_id)
    return "closed it myself"


@pytest.fixture(autouse=True)
def _nothing_performed():
    performed.clear()
    yield
    assert performed == [], "the agent ran the original tool body: it performed the write"


def _agent(gate: CountersignGate, model: ScriptedModel) -> Agent:
    close = gate.tool(close_ticket, tool="ticket.close", target="ticket_id")
    return Agent(name="support", instructions="Close fixed tickets.", model=model, tools=[close])


def _run_actions(run_id: str) -> list[Action]:
    return list(Action.objects.filter(run_id=run_id).order_by("created_at"))


def _execute(action: Action, *, status: str = "succeeded") -> None:
    """The worker's one-action step, in this process: lease, then the protocol."""
    lease = lease_claim(run_id=action.run_id, owner="test-worker")
    process_action(action_pk=action.pk, lease=lease, worker="test-worker")
    action.refresh_from_db()
    assert action.status == status, action.last_error


def _reject(action: Action, tenant, reason: str) -> None:
    reject(action, make_user(tenant, "operator"), reason=reason)


def _tool_outputs(result) -> dict[str, str]:
    return {
        item.raw_item["call_id"]: item.output
        for item in result.new_items
        if item.type == "tool_call_output_item"
    }


def test_action_ids_from_call_ids_are_valid_and_keep_distinct_calls_apart():
    ids = {action_id_for_call(call) for call in ("call_1", "call-1", "call 1", "~7", "_")}
    assert len(ids) == 5
    assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._~-]*", one) for one in ids)
    assert action_id_for_call("call_1") == action_id_for_call("call_1")


@LIVE
def test_one_gated_call_is_one_intent_across_pause_rerun_and_resume(cs, tenant, sandbox):
    run = cs.create_run("close ticket-31")
    gate = CountersignGate(cs, run_id=run["id"])
    model = ScriptedModel({"call_31": {"ticket_id": "ticket-31", "resolution": "fixed"}})
    agent = _agent(gate, model)

    paused = asyncio.run(gate.run(agent, "ticket-31 is fixed"))
    [interruption] = paused.interruptions
    assert interruption.call_id == "call_31"
    [action] = _run_actions(run["id"])
    assert action.action_id == action_id_for_call("call_31")
    assert (action.tool, action.target, action.args) == (
        "ticket.close",
        "ticket-31",
        {"resolution": "fixed"},
    )
    assert action.status == "waiting_approval"
    # The tool call itself is the evidence the operator sees.
    assert action.observation.ref == "call_31"
    assert action.observation.source == "openai-agents.close_ticket"
    stored = gate.store.get("call_31")
    assert (stored.action, stored.run_id) == (str(action.pk), run["id"])

    # The same call again, from this gate and from another process's gate: the same intent.
    asyncio.run(gate.run(agent, "ticket-31 is fixed"))
    other = CountersignGate(Countersign(cs.api_url, cs.token), run_id=run["id"])
    asyncio.run(other.run(_agent(other, ScriptedModel(model.calls)), "ticket-31 is fixed"))
    assert asyncio.run(gate.resume(agent, "call_31")) is None  # nobody decided yet
    assert len(_run_actions(run["id"])) == 1

    approve(action, make_user(tenant, "operator"))
    assert asyncio.run(gate.resume(agent, "call_31")) is None  # approved, not executed yet
    _execute(action)
    finished = asyncio.run(gate.resume(agent, "call_31"))
    assert finished.interruptions == []
    assert [one.pk for one in _run_actions(run["id"])] == [action.pk]
    assert gate.store.call_ids() == []


@LIVE
def test_after_approval_and_a_worker_the_tool_answers_the_receipt(cs, tenant, sandbox):
    run = cs.create_run("close ticket-32")
    gate = CountersignGate(cs, run_id=run["id"])
    model = ScriptedModel({"call_32": {"ticket_id": "ticket-32", "resolution": "fixed"}})
    agent = _agent(gate, model)
    asyncio.run(gate.run(agent, "ticket-32 is fixed"))
    [action] = _run_actions(run["id"])
    approve(action, make_user(tenant, "operator"))
    _execute(action)

    result = asyncio.run(gate.resume(agent, "call_32"))

    receipt = json.loads(_tool_outputs(result)["call_32"])
    assert receipt == cs.get_action(str(action.pk))["receipt"]
    assert receipt["status"] == "closed"
    assert receipt["idempotency_key"] == action.idempotency_key
    assert receipt["intent_digest"] == action.intent_digest
    assert json.loads(model.seen_outputs["call_32"]) == receipt
    assert json.loads(result.final_output) == {"call_32": model.seen_outputs["call_32"]}
    # One effect in the external system, and it was Countersign's worker that caused it.
    assert list(Effect.objects.values_list("idempotency_key", flat=True)) == [
        action.idempotency_key
    ]


@LIVE
def test_a_rejection_rejects_exactly_that_call_and_the_model_reads_the_reason(cs, tenant, sandbox):
    run = cs.create_run("close ticket-33 and ticket-34")
    gate = CountersignGate(cs, run_id=run["id"])
    model = ScriptedModel(
        {
            "call_33": {"ticket_id": "ticket-33", "resolution": "fixed"},
            "call_34": {"ticket_id": "ticket-34", "resolution": "fixed"},
        }
    )
    agent = _agent(gate, model)
    paused = asyncio.run(gate.run(agent, "both are fixed"))
    assert sorted(item.call_id for item in paused.interruptions) == ["call_33", "call_34"]
    # Countersign holds one pending intent per run: the other call is proposed after it.
    [first] = _run_actions(run["id"])
    first_call, second_call = sorted(
        model.calls, key=lambda call: action_id_for_call(call) != first.action_id
    )
    assert gate.store.get(second_call).action is None

    _reject(first, tenant, f"the customer reopened {first.target} this morning")
    halfway = asyncio.run(gate.resume(agent, first_call))
    # Only the rejected call was decided: the run pauses again on the other alone, now
    # proposed, and the model was not asked anything yet.
    assert [item.call_id for item in halfway.interruptions] == [second_call]
    assert model.requests == 1
    assert gate.store.call_ids() == [second_call]
    first.refresh_from_db()
    assert first.status == "rejected"
    [second] = [one for one in _run_actions(run["id"]) if one.pk != first.pk]
    assert second.action_id == action_id_for_call(second_call)
    assert second.status == "waiting_approval"

    approve(second, make_user(tenant, "operator"))
    _execute(second)
    finished = asyncio.run(gate.resume(agent, second_call))

    rejection = model.seen_outputs[first_call]
    assert f"the customer reopened {first.target} this morning" in rejection
    assert json.loads(model.seen_outputs[second_call])["status"] == "closed"
    assert finished.interruptions == []
    assert list(Effect.objects.values_list("target", flat=True)) == [second.target]
    assert len(_run_actions(run["id"])) == 2


@LIVE
def test_an_expired_request_rejects_that_call_and_the_model_reads_why(cs, tenant, sandbox):
    make_policy(tenant, "ticket.close", approval_seconds=1)
    run = cs.create_run("close ticket-35")
    gate = CountersignGate(cs, run_id=run["id"])
    model = ScriptedModel({"call_35": {"ticket_id": "ticket-35", "resolution": "fixed"}})
    agent = _agent(gate, model)
    asyncio.run(gate.run(agent, "ticket-35 is fixed"))
    [action] = _run_actions(run["id"])
    expire(action)

    finished = asyncio.run(gate.resume(agent, "call_35"))

    assert finished.interruptions == []
    assert "expired" in model.seen_outputs["call_35"]
    assert "nothing was sent" in model.seen_outputs["call_35"]
    assert not Effect.objects.exists()
    assert [one.pk for one in _run_actions(run["id"])] == [action.pk]


@function_tool
def notify(recipient: str, body: str) -> str:
    """Send a message."""
    performed.append(recipient)
    return "sent it myself"


@LIVE
def test_an_outcome_nobody_can_prove_reaches_the_model_with_its_case(cs, tenant, sandbox):
    set_fault(sandbox, tool="notify.send", fault="commit_then_drop")
    run = cs.create_run("tell ops")
    gate = CountersignGate(cs, run_id=run["id"])
    model = ScriptedModel({"call_n": {"recipient": "ops@example.com", "body": "done"}}, "notify")
    send = gate.tool(notify, tool="notify.send", target="recipient")
    agent = Agent(name="ops", instructions="Tell ops.", model=model, tools=[send])
    asyncio.run(gate.run(agent, "tell ops it is done"))
    [action] = _run_actions(run["id"])
    approve(action, make_user(tenant, "operator"))
    _execute(action, status="uncertain")
    call_command("sweep", verbosity=0)  # opens the case (its RQ job is not run here)

    result = asyncio.run(gate.resume(agent, "call_n"))

    case = ReconciliationCase.objects.get()
    output = _tool_outputs(result)["call_n"]
    assert output.startswith(f"Countersign: outcome unknown, case {case.id} (")
    assert f"/reconciliation/{case.id}/" in output
    assert model.seen_outputs["call_n"] == output
    # Sent once by Countersign's worker, and never again.
    assert Effect.objects.filter(tool="notify.send").count() == 1


@LIVE
def test_resuming_twice_or_in_a_new_process_from_the_stored_state_makes_no_second_intent(
    cs, tenant, sandbox, tmp_path
):
    run = cs.create_run("close ticket-35")
    calls = {"call_35": {"ticket_id": "ticket-35", "resolution": "fixed"}}
    gate = CountersignGate(cs, run_id=run["id"], store=FileStateStore(tmp_path))
    asyncio.run(gate.run(_agent(gate, ScriptedModel(calls)), "ticket-35 is fixed"))
    saved = FileStateStore(tmp_path).get("call_35")
    [action] = _run_actions(run["id"])
    approve(action, make_user(tenant, "operator"))
    _execute(action)

    def resumed_in_a_new_process() -> tuple[dict[str, str], ScriptedModel]:
        client = Countersign(cs.api_url, cs.token)
        fresh = CountersignGate(client, run_id=run["id"], store=FileStateStore(tmp_path))
        model = ScriptedModel(calls)
        result = asyncio.run(fresh.resume(_agent(fresh, model), "call_35"))
        return _tool_outputs(result), model

    first, first_model = resumed_in_a_new_process()
    assert FileStateStore(tmp_path).get("call_35") is None
    # A crash before the store forgot it: the same paused state is resumed once more.
    FileStateStore(tmp_path).put(saved)
    again, again_model = resumed_in_a_new_process()

    assert first == again
    assert json.loads(first["call_35"])["idempotency_key"] == action.idempotency_key
    # Resumed from the stored state, the model was asked only for its final answer.
    assert first_model.requests == again_model.requests == 1
    assert [one.pk for one in _run_actions(run["id"])] == [action.pk]
    assert Effect.objects.filter(target="ticket-35").count() == 1


@LIVE
def test_the_readme_example_pauses_and_resumes_with_the_receipt(
    cs, tenant, sandbox, tmp_path, monkeypatch
):
    readme = (CLIENT_DIR / "README.md").read_text()
    section = readme.split("## With the OpenAI Agents SDK", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    assert len(snippet.splitlines()) < 15
    model = ScriptedModel({"call_7": {"ticket_id": "ticket-7", "resolution": "fixed"}})
    # The example's agent talks to OpenAI; here the scripted model answers instead.
    snippet = snippet.replace('Agent("support", ', 'Agent("support", model=model, ')
    monkeypatch.chdir(tmp_path)
    run = cs.create_run("close ticket-7")
    namespace: dict[str, Any] = {"cs": cs, "run": run, "model": model}
    code = compile(snippet, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    asyncio.run(eval(code, namespace))  # the first pass pauses: nothing decided yet

    [action] = _run_actions(run["id"])
    assert namespace["result"].interruptions[0].call_id == "call_7"
    approve(action, make_user(tenant, "operator"))
    _execute(action)
    gate, agent = namespace["gate"], namespace["agent"]
    [resumed] = asyncio.run(gate.resume_decided(agent))

    assert json.loads(_tool_outputs(resumed)["call_7"])["idempotency_key"] == action.idempotency_key
    assert (tmp_path / "paused-runs").is_dir()
    assert gate.store.call_ids() == []
