"""`countersign_client.langchain` end to end: a real LangChain agent (create_agent, a scripted
chat model, an in-memory checkpointer) whose gated tool calls go through a live Countersign.
The test plays the operator (services) and the worker (lease_claim + process_action, in
process, writing to the sandbox over HTTP). No network beyond the live server; no tracing."""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.core.management import call_command
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from reconciliation.models import ReconciliationCase
from runs.execution.worker import process_action
from runs.models import Action, Observation
from runs.services import lease_claim
from sandbox.models import Effect
from tests.client.conftest import CLIENT_DIR, LIVE
from tests.factories import approve, expire, make_policy, make_user, reject
from tests.processes import wait_until
from tests.sandbox.support import set_fault

from countersign_client import Countersign, content_hash  # isort: skip
from countersign_client.langchain import (  # isort: skip
    INTERRUPT_TYPE,
    CountersignMiddleware,
    Gate,
    gate_tool_call,
)

pytestmark = LIVE

THREAD = {"configurable": {"thread_id": "support-thread-1"}}
GATES = {
    "close_ticket": Gate(
        "ticket.close", lambda call: (call["ticket_id"], {"resolution": call["resolution"]})
    ),
    "notify": Gate("notify.send", lambda call: (call["recipient"], {"body": call["body"]})),
}
BODIES_RUN: list[str] = []


@tool
def close_ticket(ticket_id: str, resolution: str) -> str:
    """Close a ticket in the ticket desk."""
    BODIES_RUN.append("close_ticket")
    pytest.fail("the agent ran close_ticket itself: only a Countersign worker may close it")


@tool
def notify(recipient: str, body: str) -> str:
    """Send a notification."""
    BODIES_RUN.append("notify")
    pytest.fail("the agent ran notify itself: only a Countersign worker may send it")


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering its script; it takes tools without using them."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.setenv(name, "false")
    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    monkeypatch.delenv("LANGCHAIN_API_KEY", raising=False)
    BODIES_RUN.clear()
    yield
    assert BODIES_RUN == [], "a gated tool's body ran inside the agent"


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]
    )


def make_agent(cs: Countersign, run_id: str, *script: AIMessage, saver=None):
    model = ScriptedModel(messages=iter([*script, AIMessage(content="All done.")]))
    return create_agent(
        model,
        tools=[close_ticket, notify],
        middleware=[CountersignMiddleware(cs, gates=GATES, run_id=run_id)],
        checkpointer=saver or InMemorySaver(),
    )


def close(ticket: str, call_id: str = "call_1") -> AIMessage:
    return call("close_ticket", call_id, ticket_id=ticket, resolution="fixed")


def execute(action: Action) -> Action:
    """What an RQ worker does with the approved action, in this process."""
    action.refresh_from_db()
    lease = lease_claim(run_id=action.run_id, owner="worker")
    process_action(action_pk=action.pk, lease=lease, worker="worker")
    action.refresh_from_db()
    return action


def paused_on(result: dict) -> dict:
    [paused] = result["__interrupt__"]
    assert paused.value["type"] == INTERRUPT_TYPE
    return paused.value


def answer(result: dict) -> ToolMessage:
    [message] = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    return message


def test_a_gated_call_proposes_once_across_an_interrupt_and_resumes_with_the_receipt(
    cs, tenant, sandbox
):
    run = cs.create_run("close ticket-7 once the customer confirmed the fix")
    agent = make_agent(cs, run["id"], close("ticket-7"))

    pending = paused_on(agent.invoke({"messages": [("user", "close ticket-7")]}, THREAD))
    [action] = Action.objects.filter(run_id=run["id"])
    assert action.status == "waiting_approval"
    assert (pending["id"], pending["intent_digest"]) == (str(action.pk), action.intent_digest)
    assert pending["inbox_url"] == f"{cs.api_url.removesuffix('/api/v1')}/inbox/#action-{action.pk}"
    assert (pending["tool"], pending["target"], pending["args"]) == (
        "ticket.close",
        "ticket-7",
        {"resolution": "fixed"},
    )
    # The model's tool call is the evidence the intent rests on.
    assert action.observation.source == "langchain.tool_call"
    assert action.observation.ref == "call_1"
    tool_call = {"args": {"resolution": "fixed", "ticket_id": "ticket-7"}, "id": "call_1"}
    seen = json.dumps({**tool_call, "name": "close_ticket"}, sort_keys=True, separators=(",", ":"))
    assert action.observation.content_hash == content_hash(seen)

    # Resumed before anyone decided: it pauses again on the same intent.
    again = paused_on(agent.invoke(Command(resume=True), THREAD))
    assert again["id"] == pending["id"]
    assert Action.objects.filter(run_id=run["id"]).count() == 1

    approve(action, make_user(tenant, "operator"))
    action = execute(action)
    assert action.status == "succeeded"
    result = agent.invoke(Command(resume=True), THREAD)

    message = answer(result)
    assert message.status == "success"
    assert message.tool_call_id == "call_1"
    assert message.artifact["receipt"]["receipt_id"] in message.content
    assert message.artifact["receipt"]["idempotency_key"] == action.idempotency_key
    assert result["messages"][-1].content == "All done."
    assert Action.objects.filter(run_id=run["id"]).count() == 1
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1


def test_a_restarted_agent_resuming_the_thread_finds_the_same_intent(cs, tenant, sandbox):
    run = cs.create_run("close ticket-8")
    saver = InMemorySaver()
    first = make_agent(cs, run["id"], close("ticket-8"), saver=saver)
    pending = paused_on(first.invoke({"messages": [("user", "close ticket-8")]}, THREAD))
    action = Action.objects.get(run_id=run["id"])
    approve(action, make_user(tenant, "operator"))
    execute(action)

    # A new process: a new client, a new agent, the same checkpoints. The tool node runs
    # again from its start, proposing the same action_id and arguments.
    restarted_client = Countersign(cs.api_url, cs.token, retries=2, backoff=0.05)
    restarted = make_agent(restarted_client, run["id"], saver=saver)
    message = answer(restarted.invoke(Command(resume=True), THREAD))

    assert message.status == "success"
    assert message.artifact["id"] == pending["id"]
    assert Action.objects.filter(run_id=run["id"]).count() == 1
    assert Observation.objects.filter(run_id=run["id"]).count() == 1
    assert Effect.objects.count() == 1


def test_an_async_agent_pauses_and_resumes_the_same_way(cs, tenant, sandbox):
    run = cs.create_run("close ticket-14")
    agent = make_agent(cs, run["id"], close("ticket-14"))

    paused = asyncio.run(agent.ainvoke({"messages": [("user", "close ticket-14")]}, THREAD))
    action = Action.objects.get(run_id=run["id"])
    approve(action, make_user(tenant, "operator"))
    execute(action)
    result = asyncio.run(agent.ainvoke(Command(resume=True), THREAD))

    assert paused_on(paused)["id"] == str(action.pk)
    assert Action.objects.filter(run_id=run["id"]).count() == 1
    assert answer(result).artifact["receipt"]["idempotency_key"] == action.idempotency_key


def test_a_rejection_reaches_the_model_with_the_operators_reason(cs, tenant, sandbox):
    run = cs.create_run("close ticket-9")
    agent = make_agent(cs, run["id"], close("ticket-9"))
    paused_on(agent.invoke({"messages": [("user", "close ticket-9")]}, THREAD))
    action = Action.objects.get(run_id=run["id"])
    reject(action, make_user(tenant, "operator"), reason="the customer reopened it this morning")

    message = answer(agent.invoke(Command(resume=True), THREAD))

    assert message.status == "error"
    assert "Rejected by an operator: the customer reopened it this morning." in message.content
    assert message.artifact["status"] == "rejected"
    assert not Effect.objects.exists()
    assert Action.objects.filter(run_id=run["id"]).count() == 1


def test_an_expired_request_reaches_the_model_as_never_approved(cs, tenant, sandbox):
    make_policy(tenant, "ticket.close", approval_seconds=1)
    run = cs.create_run("close ticket-8")
    agent = make_agent(cs, run["id"], close("ticket-8"))
    paused_on(agent.invoke({"messages": [("user", "close ticket-8")]}, THREAD))
    action = Action.objects.get(run_id=run["id"])
    expire(action)

    message = answer(agent.invoke(Command(resume=True), THREAD))

    assert message.status == "error"
    assert "expired before anyone decided. Nothing was sent." in message.content
    assert message.artifact["status"] == "expired"
    assert not Effect.objects.exists()
    assert Action.objects.filter(run_id=run["id"]).count() == 1


def test_an_outcome_nobody_can_prove_reaches_the_model_with_the_case_link(cs, tenant, sandbox):
    set_fault(sandbox, tool="notify.send", fault="commit_then_drop")
    run = cs.create_run("tell ops the ticket is closed")
    script = call("notify", "call_9", recipient="ops@example.com", body="ticket-7 is closed")
    agent = make_agent(cs, run["id"], script)
    paused_on(agent.invoke({"messages": [("user", "tell ops")]}, THREAD))
    action = Action.objects.get(run_id=run["id"])
    approve(action, make_user(tenant, "operator"))
    assert execute(action).status == "uncertain"
    call_command("sweep", verbosity=0)  # opens the case where no RQ worker picked it up

    message = answer(agent.invoke(Command(resume=True), THREAD))

    case = ReconciliationCase.objects.get()
    case_url = f"{cs.api_url.removesuffix('/api/v1')}/reconciliation/{case.id}/"
    assert message.status == "error"
    assert message.content.startswith(f"Outcome unknown, case {case_url}")


def test_arguments_the_tool_refuses_go_back_to_the_model_without_an_intent(cs, sandbox):
    run = cs.create_run("close a ticket that cannot exist")
    agent = make_agent(cs, run["id"], close("not-a-ticket"))

    result = agent.invoke({"messages": [("user", "close it")]}, THREAD)

    assert "__interrupt__" not in result
    message = answer(result)
    assert message.status == "error"
    assert message.content.startswith("Countersign refused this call:")
    assert not Action.objects.filter(run_id=run["id"]).exists()


def test_two_gated_calls_in_one_turn_freeze_one_intent_and_tell_the_model_about_the_other(
    cs, tenant, sandbox
):
    run = cs.create_run("close two tickets")
    both = AIMessage(
        content="",
        tool_calls=[
            *close("ticket-12", "call_a").tool_calls,
            *close("ticket-13", "call_b").tool_calls,
        ],
    )
    agent = make_agent(cs, run["id"], both)

    paused_on(agent.invoke({"messages": [("user", "close both")]}, THREAD))
    action = Action.objects.get(run_id=run["id"])
    approve(action, make_user(tenant, "operator"))
    execute(action)
    result = agent.invoke(Command(resume=True), THREAD)

    messages = {m.status: m for m in result["messages"] if isinstance(m, ToolMessage)}
    assert set(messages) == {"success", "error"}
    assert messages["success"].artifact["id"] == str(action.pk)
    assert messages["error"].content.startswith("Countersign did not take this call now:")
    assert Action.objects.filter(run_id=run["id"]).count() == 1
    assert Effect.objects.count() == 1


def test_gate_tool_call_gates_a_tool_call_inside_a_plain_langgraph_graph(cs, tenant, sandbox):
    run = cs.create_run("close ticket-11")
    gate = GATES["close_ticket"]

    def tools(state: MessagesState) -> dict:
        calls = state["messages"][-1].tool_calls
        return {"messages": [gate_tool_call(cs, c, gate, run_id=run["id"]) for c in calls]}

    builder = StateGraph(MessagesState)
    builder.add_node("tools", tools)
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=InMemorySaver())

    pending = paused_on(graph.invoke({"messages": [close("ticket-11", "call_7")]}, THREAD))
    action = Action.objects.get(run_id=run["id"])
    assert pending["id"] == str(action.pk)
    approve(action, make_user(tenant, "operator"))
    execute(action)
    message = answer(graph.invoke(Command(resume=True), THREAD))

    assert message.status == "success"
    assert message.artifact["receipt"]["status"] == "closed"
    assert Action.objects.filter(run_id=run["id"]).count() == 1
    # The resume after the outcome asked for the frozen intent first: no second observation.
    assert list(Observation.objects.filter(run_id=run["id"])) == [action.observation]


def test_the_readme_integration_runs_and_prints_the_receipt(cs, tenant, sandbox, capsys):
    blocks = re.findall(r"```python\n(.*?)```", (CLIENT_DIR / "README.md").read_text(), re.DOTALL)
    [snippet] = [block for block in blocks if "CountersignMiddleware" in block]
    run = cs.create_run("close ticket-7 once the customer confirmed the fix")
    model = ScriptedModel(messages=iter([close("ticket-7"), AIMessage(content="Closed.")]))
    namespace = {"cs": cs, "run": run, "model": model, "close_ticket": close_ticket}
    with ThreadPoolExecutor(max_workers=1) as agent:
        running = agent.submit(exec, snippet, namespace)
        printed: list[str] = []
        # Decide only once the agent has paused and printed the inbox link, as a person would.
        wait_until(
            lambda: printed.extend(capsys.readouterr().out.splitlines()) or printed,
            timeout=20,
            message="the README's agent never paused on its intent",
        )
        action = Action.objects.get(run_id=run["id"])
        assert printed == [f"{cs.api_url.removesuffix('/api/v1')}/inbox/#action-{action.pk}"]
        approve(action, make_user(tenant, "operator"))
        execute(action)
        running.result(timeout=60)

    [outcome] = capsys.readouterr().out.splitlines()
    assert outcome.startswith("Approved and executed. Receipt: ")
    assert namespace["done"]["messages"][-1].content == "Closed."
