"""Countersign for the OpenAI Agents SDK's human-in-the-loop (`pip install
'countersign-client[openai-agents]'`).

`CountersignGate.tool(some_tool, tool="ticket.close", target="ticket_id")` turns an SDK
function tool into a countersigned one:

- its `needs_approval` proposes the frozen intent to Countersign, keyed by the SDK's tool call
  id (action id `oa-...` derived from it: the same call is always the same intent), with the
  tool call itself recorded as the observation that justifies it; the run pauses there;
- `gate.run(...)` / `gate.pause(result)` keep the paused RunState with the intent in a
  `StateStore`, so any process can resume it;
- `gate.resume(agent, call_id)` waits for Countersign's outcome and then approves or rejects
  exactly that call id on the restored RunState and runs on (an operator's reason reaches the
  model as the rejection message);
- the tool's body never performs the write: it answers the receipt of the intent a
  Countersign worker executed, or says why there is none (expired, outcome unknown with its
  reconciliation case, failed, cancelled).

The original function is never called.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

try:
    from agents import Agent, FunctionTool, Runner, RunResult, RunState
    from agents.items import ToolApprovalItem
    from agents.run_context import RunContextWrapper
    from agents.tool_context import ToolContext
except ImportError as missing:  # the extra is optional: name it
    raise ImportError(
        "countersign_client.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'countersign-client[openai-agents]'"
    ) from missing

from countersign_client import errors
from countersign_client.approval import Intent, Observation, propose_intent
from countersign_client.client import Countersign, receipt_of
from countersign_client.paused import FileStateStore, MemoryStateStore, PausedCall, StateStore
from countersign_client.types import Action

__all__ = [
    "CountersignGate",
    "FileStateStore",
    "MemoryStateStore",
    "PausedCall",
    "Proposal",
    "StateStore",
    "action_id_for_call",
    "outcome_text",
]

logger = logging.getLogger(__name__)

ACTION_ID_PREFIX = "oa-"
# Countersign's action ids: a letter or digit, then letters, digits and `._~-`.
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")


@dataclass(frozen=True)
class Proposal:
    """What a tool call asks Countersign to do: target and arguments of the Countersign
    tool, and optionally the observation it rests on (by default, the tool call itself)."""

    target: str
    args: dict[str, Any]
    observation: Observation | None = None


def action_id_for_call(call_id: str) -> str:
    """The logical action id of a tool call: readable, and distinct for distinct call ids
    (the hash keeps `call_1` and `call-1` apart once unsafe characters are replaced)."""
    readable = _UNSAFE.sub("-", call_id).strip("-")[:100]
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:16]
    return f"{ACTION_ID_PREFIX}{readable}-{digest}" if readable else ACTION_ID_PREFIX + digest


@dataclass(frozen=True)
class _Countersigned:
    """One gated SDK tool: its Countersign tool and how a call maps to a proposal."""

    name: str
    tool: str
    propose: Callable[[dict[str, Any]], Proposal]


class CountersignGate:
    """Countersigns chosen tools of one Countersign run.

    `store` keeps paused runs (a MemoryStateStore unless given; use a FileStateStore to
    resume in another process). `wait_seconds` bounds how long a tool body waits for an
    outcome when it runs before one exists (it normally runs after `resume` saw it).
    """

    def __init__(
        self,
        client: Countersign,
        *,
        run_id: str,
        store: StateStore | None = None,
        contract_version: str = "v1",
        wait_seconds: float = 30.0,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.store: StateStore = store if store is not None else MemoryStateStore()
        self.contract_version = contract_version
        self.wait_seconds = wait_seconds
        self._gated: dict[str, _Countersigned] = {}
        # What this process already knows per call id: the proposed (or finished) action.
        self._actions: dict[str, Action] = {}
        # Parallel tool calls are gated concurrently; the run takes one proposal at a time.
        self._proposing = threading.Lock()

    # Building tools.

    def tool(
        self,
        function_tool: FunctionTool,
        *,
        tool: str,
        target: str | None = None,
        propose: Callable[[dict[str, Any]], Proposal] | None = None,
    ) -> FunctionTool:
        """A copy of `function_tool` (same name, description and schema) that needs
        Countersign's approval and whose body returns the receipt instead of acting.

        Give `target`, the name of the argument that is the Countersign target (the others
        become its args), or `propose`, a function from the call's arguments to a Proposal.
        """
        if (target is None) == (propose is None):
            raise ValueError("give exactly one of target= or propose=")
        if propose is None:
            propose = _by_target_argument(target or "")
        gated = _Countersigned(name=function_tool.name, tool=tool, propose=propose)
        self._gated[gated.name] = gated

        async def needs_approval(
            _context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            await asyncio.to_thread(self._propose_or_note, gated, call_id, params)
            return True  # Even when Countersign could not be reached: the call waits.

        async def receipt(context: ToolContext[Any], arguments: str) -> str:
            return await asyncio.to_thread(self._tool_output, gated, context, arguments)

        return FunctionTool(
            name=function_tool.name,
            description=function_tool.description,
            params_json_schema=function_tool.params_json_schema,
            on_invoke_tool=receipt,
            strict_json_schema=function_tool.strict_json_schema,
            is_enabled=function_tool.is_enabled,
            tool_input_guardrails=function_tool.tool_input_guardrails,
            needs_approval=needs_approval,
        )

    # Pausing and resuming.

    async def run(self, agent: Agent[Any], input: Any, **options: Any) -> RunResult:
        """`Runner.run`, then `pause(result)`: the paused calls are in the store."""
        result = await Runner.run(agent, input, **options)
        await asyncio.to_thread(self.pause, result)
        return result

    def pause(self, result: RunResult) -> list[PausedCall]:
        """Stores the run state for each countersigned call the run paused on, with its
        intent (proposing it now if the gate could not). Other interruptions are the
        application's: they are left alone."""
        ours = [item for item in result.interruptions if self._is_ours(item)]
        if not ours:
            return []
        state = result.to_state().to_string()
        paused = [self._paused(item, state) for item in ours]
        for call in paused:
            self.store.put(call)
        return paused

    async def resume(
        self, agent: Agent[Any], call_id: str, *, timeout: float = 0.0, **options: Any
    ) -> RunResult | None:
        """Resumes the run paused on `call_id` once Countersign has an outcome for it: an
        operator's rejection (or an expiry) rejects exactly that call with the reason; any
        other outcome approves it, and the tool answers the receipt or what happened.

        Answers None while the intent still waits for an operator or a worker (after
        waiting up to `timeout` seconds). Resuming the same paused call again answers the
        same outcome and never proposes a second intent.
        """
        paused = self.store.get(call_id)
        if paused is None:
            raise LookupError(f"no paused run for tool call {call_id!r}")
        decision = await asyncio.to_thread(self._decision, paused, timeout)
        if decision is None:
            return None
        approved, message = decision
        state = await RunState.from_string(agent, paused.state)
        item = _interruption(state, call_id)
        if approved:
            state.approve(item)
        else:
            state.reject(item, rejection_message=message)
        result = await Runner.run(agent, state, **options)
        await asyncio.to_thread(self.pause, result)
        self.store.delete(call_id)
        return result

    async def resume_decided(self, agent: Agent[Any], **options: Any) -> list[RunResult]:
        """Resumes every paused call of this gate's run that Countersign has an outcome for."""
        results = []
        for call_id in self.store.call_ids():
            paused = self.store.get(call_id)
            if paused is None or paused.run_id != self.run_id:
                continue
            result = await self.resume(agent, call_id, **options)
            if result is not None:
                results.append(result)
        return results

    # Countersign.

    def _propose(self, gated: _Countersigned, call_id: str, params: dict[str, Any]) -> Action:
        """Records the tool call as evidence and freezes its intent; for a call already
        proposed, answers the same intent (Countersign finds it by its action id)."""
        with self._proposing:
            known = self._actions.get(call_id)
            if known is not None:
                return known
            proposal = gated.propose(params)
            seen = proposal.observation or _call_as_observation(gated.name, call_id, params)
            intent = Intent(action_id_for_call(call_id), proposal.target, proposal.args, seen)
            version = self.contract_version
            action = propose_intent(self.client, self.run_id, gated.tool, version, intent)
            self._actions[call_id] = action
            return action

    def _propose_or_note(self, gated: _Countersigned, call_id: str, params: dict[str, Any]) -> None:
        # The SDK would take an exception here for "needs approval" and say nothing;
        # pause() proposes again, and raises what still fails.
        try:
            self._propose(gated, call_id, params)
        except errors.Conflict:
            pass  # The run holds another pending intent: pause() or resume() proposes it.
        except errors.CountersignError as error:
            logger.warning("could not propose tool call %s to Countersign: %s", call_id, error)

    def _paused(self, item: ToolApprovalItem, state: str) -> PausedCall:
        call_id = str(item.call_id)
        paused = PausedCall(
            call_id=call_id,
            tool_name=str(item.name),
            run_id=self.run_id,
            action_id=action_id_for_call(call_id),
            action=None,
            state=state,
            arguments=item.arguments or "{}",
        )
        return self._proposed(paused)

    def _proposed(self, paused: PausedCall) -> PausedCall:
        """The paused call with its intent, proposed now if it was not yet; or, when
        Countersign refuses its arguments for good, with the reason."""
        if paused.action is not None or paused.refused:
            return paused
        try:
            arguments = _arguments(paused.arguments)
            action = self._propose(self._gated[paused.tool_name], paused.call_id, arguments)
        except errors.Conflict:
            # The run holds another pending intent (Countersign takes one at a time): this
            # call is proposed on a later pause or resume, once that one is decided.
            return paused
        except (errors.Unprocessable, ValueError) as error:
            # Never frozen with these arguments: resume tells the model why.
            return replace(paused, refused=getattr(error, "detail", "") or str(error))
        return replace(paused, action=action["id"])

    def _decision(self, paused: PausedCall, timeout: float) -> tuple[bool, str] | None:
        """(approve?, rejection message) once Countersign has an outcome; None before."""
        proposed = self._proposed(paused)
        if proposed != paused:
            self.store.put(proposed)
        if proposed.refused:
            return False, f"Countersign refused this call: {proposed.refused}"
        if proposed.action is None:
            return None
        try:
            action = self.client.wait_for(proposed.action, timeout)
        except errors.WaitTimeout:
            return None
        self._actions[paused.call_id] = action
        if action["status"] == "rejected":
            reason = (action["decision"] or {}).get("reason") or "no reason given"
            return False, f"An operator rejected this in Countersign: {reason}"
        if action["status"] == "expired":
            return False, "Nobody approved this in Countersign before it expired; nothing was sent."
        return True, ""

    def _tool_output(self, gated: _Countersigned, context: ToolContext[Any], arguments: str) -> str:
        """The tool's body after approval: the receipt, never the write itself."""
        call_id = context.tool_call_id
        action = self._actions.get(call_id)
        if action is None:
            paused = self.store.get(call_id)
            if paused is not None and paused.action is not None:
                action = self.client.get_action(paused.action)
            else:
                action = self._propose(gated, call_id, _arguments(arguments))
        try:
            finished = self.client.wait_for(action["id"], self.wait_seconds)
        except errors.WaitTimeout as waiting:
            return (
                f"Countersign: {action['action_id']} is still {waiting.action['status']}; "
                "nothing is known to have been sent yet."
            )
        self._actions[call_id] = finished
        return outcome_text(finished)

    def _is_ours(self, item: ToolApprovalItem) -> bool:
        return item.call_id is not None and item.name in self._gated


def outcome_text(action: Action) -> str:
    """What the model reads for a finished intent: the receipt as JSON, or why there is none."""
    try:
        return json.dumps(receipt_of(action), sort_keys=True)
    except errors.Uncertain as uncertain:
        case = uncertain.case_id or "not opened yet"
        where = f" ({uncertain.case_url})" if uncertain.case_url else ""
        return (
            f"Countersign: outcome unknown, case {case}{where}. The write may or may not have "
            "happened; a person reconciles it. Do not retry it."
        )
    except errors.Rejected as rejected:
        return f"Countersign: an operator rejected it: {rejected.reason or 'no reason given'}"
    except errors.ActionNotDone as not_done:
        return f"Countersign: {not_done}"


def _by_target_argument(name: str) -> Callable[[dict[str, Any]], Proposal]:
    def propose(params: dict[str, Any]) -> Proposal:
        if name not in params:
            raise ValueError(f"the tool call has no argument {name!r} to use as its target")
        args = {key: value for key, value in params.items() if key != name}
        return Proposal(target=str(params[name]), args=args)

    return propose


def _call_as_observation(name: str, call_id: str, params: dict[str, Any]) -> Observation:
    call = json.dumps({"call_id": call_id, "name": name, "arguments": params}, sort_keys=True)
    return Observation(
        source=f"openai-agents.{name}",
        ref=call_id[:500],
        summary=f"the model called {name} with {json.dumps(params, sort_keys=True)}"[:500],
        content=call,
    )


def _arguments(arguments: str | None) -> dict[str, Any]:
    parsed = json.loads(arguments or "{}")
    if not isinstance(parsed, dict):
        raise ValueError("the tool call's arguments are not a JSON object")
    return parsed


def _interruption(state: RunState[Any], call_id: str) -> ToolApprovalItem:
    for item in state.get_interruptions():
        if item.call_id == call_id:
            return item
    raise LookupError(f"the stored run state is not paused on tool call {call_id!r}")
