"""LangChain and LangGraph: gate an agent's tool calls through Countersign.

`CountersignMiddleware` is a LangChain 1.x agent middleware (`create_agent(...,
middleware=[...])`). For each call of a gated tool it records the tool call as the
observation, proposes the frozen intent, and pauses the graph with a LangGraph `interrupt`
carrying the pending action (id, digest, inbox link). Resumed with `Command(resume=...)`, it
asks Countersign for the outcome and answers the model with a ToolMessage: the receipt, the
operator's reason for a rejection, an expiry, or "outcome unknown, case <url>". The tool's
own body never runs for a gated tool: a Countersign worker performs the write.

`gate_tool_call` does the same for one tool call inside a plain LangGraph node.

The intent's `action_id` derives from the thread id and the tool call's id, so re-running
the node (every resume does) proposes the same intent and the server answers the one it
froze. Needs `pip install 'countersign-client[langchain]'` and a checkpointer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

try:
    from langchain.agents.middleware import AgentMiddleware, ToolCallRequest
    from langchain_core.messages import ToolCall, ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.config import get_config
    from langgraph.types import Command, interrupt
except ImportError as missing:  # no [langchain] extra: see tests/client/test_install.py
    raise ImportError(
        "countersign_client.langchain needs LangChain and LangGraph: "
        "pip install 'countersign-client[langchain]'"
    ) from missing

from countersign_client import errors
from countersign_client.approval import Intent, Observation, propose_intent
from countersign_client.client import PENDING_STATUSES, Countersign, receipt_of
from countersign_client.types import Action

__all__ = [
    "INTERRUPT_TYPE",
    "CountersignMiddleware",
    "Gate",
    "action_id_for",
    "gate_tool_call",
    "tool_message_for",
]

INTERRUPT_TYPE = "countersign_approval"
RUN_ID_KEY = "countersign_run_id"
OBSERVATION_SOURCE = "langchain.tool_call"
# An uncertain outcome's reconciliation case opens within seconds; the agent gets its link.
_CASE_WAIT_SECONDS = 10.0
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")

TargetAndArgs = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Gate:
    """How calls of one LangChain tool become intents of one Countersign tool.

    `intent` turns the tool call's arguments into the Countersign `(target, args)`, e.g.
    `lambda call: (call["ticket_id"], {"resolution": call["resolution"]})`.
    """

    tool: str
    intent: TargetAndArgs
    contract_version: str = "v1"


class CountersignMiddleware(AgentMiddleware):
    """Gates the calls of the tools named in `gates` (LangChain tool name -> Gate).

    `run_id` is the Countersign run the intents belong to; without it, each invocation
    names its run in `config["configurable"]["countersign_run_id"]`. `wait` is how long
    (seconds) to wait for an outcome before pausing, and again on each resume; a resume
    may override it with `Command(resume={"wait": 30})`. Other tools run untouched.
    """

    def __init__(
        self,
        client: Countersign,
        *,
        gates: Mapping[str, Gate],
        run_id: str | None = None,
        wait: float = 0.0,
    ) -> None:
        super().__init__()
        self.client = client
        self.gates = dict(gates)
        self.run_id = run_id
        self.wait = wait

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command],
    ) -> ToolMessage | Command:
        gate = self.gates.get(request.tool_call["name"])
        if gate is None:
            return handler(request)
        return gate_tool_call(
            self.client,
            request.tool_call,
            gate,
            run_id=self.run_id,
            config=request.runtime.config,
            wait=self.wait,
        )

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]],
    ) -> ToolMessage | Command:
        gate = self.gates.get(request.tool_call["name"])
        if gate is None:
            return await handler(request)
        # The client is synchronous; to_thread carries the graph's context (for interrupt).
        return await asyncio.to_thread(
            gate_tool_call,
            self.client,
            request.tool_call,
            gate,
            run_id=self.run_id,
            config=request.runtime.config,
            wait=self.wait,
        )


def gate_tool_call(
    client: Countersign,
    tool_call: ToolCall,
    gate: Gate,
    *,
    run_id: str | None = None,
    config: RunnableConfig | None = None,
    wait: float = 0.0,
) -> ToolMessage:
    """Proposes `tool_call` as an intent and answers its outcome as a ToolMessage.

    Call it inside a LangGraph node (with a checkpointer): while the intent waits for an
    operator or a worker, it raises LangGraph's interrupt; resume the graph to ask again.
    """
    config = config if config is not None else get_config()
    run = run_id or config.get("configurable", {}).get(RUN_ID_KEY)
    if not run:
        raise ValueError(f"name the Countersign run: run_id=..., or configurable[{RUN_ID_KEY!r}]")
    target, args = gate.intent(dict(tool_call["args"]))
    intent = Intent(
        action_id=action_id_for(_thread_id(config), tool_call),
        target=target,
        args=args,
        observation=_observation_of(tool_call),
    )
    try:
        action = propose_intent(client, run, gate.tool, gate.contract_version, intent)
    except (errors.InvalidArguments, errors.ValidationFailed) as refused:
        # The model's arguments do not fit the tool: tell the model, which can correct them.
        return _message(tool_call, f"Countersign refused this call: {refused.detail}", "error")
    except errors.Conflict as busy:
        # A run has one pending write at a time (or it has stopped): another gated call of
        # the same turn holds it. Nothing was frozen; the model may call again afterwards.
        text = f"Countersign did not take this call now: {busy.detail}. Nothing was sent."
        return _message(tool_call, text, "error")
    while True:
        settled = _settled(client, action, wait)
        if settled is not None:
            return tool_message_for(tool_call, settled)
        answer = interrupt(approval_request(client, tool_call, action))
        if isinstance(answer, dict) and isinstance(answer.get("wait"), int | float):
            wait = float(answer["wait"])


def action_id_for(thread_id: str, tool_call: ToolCall) -> str:
    """The intent's stable logical id: the same thread and tool call give the same id."""
    seed = json.dumps([thread_id, tool_call["id"]], ensure_ascii=False).encode()
    name = _UNSAFE.sub("-", tool_call["name"]).strip("-.")[:60] or "tool"
    return f"lc-{name}-{hashlib.sha256(seed).hexdigest()[:24]}"


def approval_request(client: Countersign, tool_call: ToolCall, action: Action) -> dict[str, Any]:
    """The interrupt's value: what an operator is asked to approve, and where."""
    return {
        "type": INTERRUPT_TYPE,
        "tool_call_id": tool_call["id"],
        "name": tool_call["name"],
        "id": action["id"],
        "action_id": action["action_id"],
        "run_id": action["run_id"],
        "tool": action["tool"],
        "target": action["target"],
        "args": action["args"],
        "intent_digest": action["intent_digest"],
        "status": action["status"],
        "inbox_url": f"{_server_url(client)}/inbox/#action-{action['id']}",
    }


def tool_message_for(tool_call: ToolCall, action: Action) -> ToolMessage:
    """The model's answer for a finished action; `artifact` keeps the whole action."""
    try:
        receipt = receipt_of(action)
    except errors.Rejected as rejected:
        reason = rejected.reason or "no reason given"
        text = f"Rejected by an operator: {reason}. Nothing was sent; do not retry it unchanged."
    except errors.Expired:
        text = "The approval request expired before anyone decided. Nothing was sent."
    except errors.Uncertain as uncertain:
        text = (
            f"Outcome unknown, case {uncertain.case_url or '(not opened yet)'}: the write may "
            "or may not have happened. Do not retry it; a person reconciles it."
        )
    except errors.Cancelled:
        text = "The run stopped before this was sent. Nothing was sent."
    except errors.ActionFailed as failed:
        text = f"The tool refused it ({failed.error_class}): {failed.error}. It was not retried."
    else:
        body = json.dumps(receipt, ensure_ascii=False, sort_keys=True)
        return _message(tool_call, f"Approved and executed. Receipt: {body}", "success", action)
    return _message(tool_call, text, "error", action)


def _settled(client: Countersign, action: Action, wait: float) -> Action | None:
    """The action once it has an outcome, or None while it still waits."""
    try:
        action = client.wait_for(action["id"], timeout=max(wait, 0.0))
    except errors.WaitTimeout:
        return None
    if action["status"] == "uncertain" and action["reconciliation_case"] is None:
        action = client.wait_for(action["id"], timeout=_CASE_WAIT_SECONDS)
    return None if action["status"] in PENDING_STATUSES else action


def _observation_of(tool_call: ToolCall) -> Observation:
    """The model's tool call itself is the evidence the intent rests on."""
    evidence = {"name": tool_call["name"], "args": tool_call["args"], "id": tool_call["id"]}
    return Observation(
        source=OBSERVATION_SOURCE,
        ref=str(tool_call["id"] or tool_call["name"])[:500],
        summary=f"The agent's model called {tool_call['name']} (tool call {tool_call['id']}).",
        content=json.dumps(evidence, ensure_ascii=False, sort_keys=True, separators=(",", ":")),
    )


def _thread_id(config: RunnableConfig) -> str:
    thread_id = config.get("configurable", {}).get("thread_id")
    if thread_id is None:
        raise ValueError(
            "a gated tool call needs a thread: compile with a checkpointer and invoke with "
            "config={'configurable': {'thread_id': ...}}"
        )
    return str(thread_id)


def _message(
    tool_call: ToolCall, text: str, status: str, action: Action | None = None
) -> ToolMessage:
    return ToolMessage(
        content=text,
        tool_call_id=tool_call["id"],
        name=tool_call["name"],
        status=status,
        artifact=dict(action) if action is not None else None,
    )


def _server_url(client: Countersign) -> str:
    return client.api_url.removesuffix("/api/v1")
