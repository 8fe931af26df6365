"""What the MCP gateway's tools do, as plain synchronous calls on the database.

A read_only tool (one the tenant lets run without approval) is called at once and its answer
recorded as an observation of the session's run. Anything else is a write: it is frozen as
an intent and the caller gets the envelope of runs.gateway.outcomes back at once; the write
is executed by a worker once a person approves it, never here and never by the agent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from pydantic import ValidationError

from control.api_kit.limits import long_poll_slot
from control.foundation.canonical import intent_digest
from runs.agent_fields import McpCallIn
from runs.exceptions import InvalidArguments, InvalidTransition, RunsError
from runs.gateway.outcomes import outcome
from runs.gateway.sessions import Caller, agent_locked, session_run, session_start_run
from runs.models import Run
from runs.selectors import (
    action_with_decisions,
    agent_write,
    latest_observation,
    open_write,
    tool_catalog,
)
from runs.services import action_propose, observation_record
from runs.tools import errors as tool_errors
from runs.tools.calls import ToolCall
from runs.tools.registry import get_tool
from runs.tools.retry import DEFAULT_POLICY
from runs.waiting import WAITED_ON_STATUSES, status_after_waiting

# countersign_wait waits at most this long: under the common 60 s proxy and client timeouts.
MAX_WAIT_SECONDS = 50
# The logical id of a write the client names none for: the tool and canonical arguments.
DERIVED_ID_PREFIX = "mcp-"


class Refused(Exception):
    """A call the gateway answers with an error result the model can read and correct."""


def latest_tools(caller: Caller) -> list[dict[str, Any]]:
    """The tenant's catalog (tool_catalog), one entry per tool: its newest contract version."""
    newest = {}
    for entry in tool_catalog(tenant=caller.token.tenant):
        if entry["contract_version"] == get_tool(entry["name"]).contract_version:
            newest[entry["name"]] = entry
    return [newest[name] for name in sorted(newest)]


def is_read(entry: dict[str, Any]) -> bool:
    """Runs at once: changes nothing, and the tenant asks no approval for it."""
    return entry["effect_class"] == "read_only" and not entry["needs_approval"]


def call_tool(caller: Caller, entry: dict[str, Any], arguments: dict[str, Any]) -> dict:
    """A catalog tool's call: a read's answer, or a write's envelope."""
    call = _call_arguments(arguments)
    target, args, action_id = call.target, call.args, call.action_id
    tool = get_tool(entry["name"], entry["contract_version"])
    try:
        target, args = tool.normalize(target=target, args=args)
    except tool_errors.ToolError as error:
        raise Refused(str(error)) from None
    if is_read(entry):
        return _read(caller, tool, target, args)
    return _write(caller, tool, target, args, action_id)


def _call_arguments(arguments: dict[str, Any]) -> McpCallIn:
    """The call's target, args and action_id under the REST API's rules for the same fields
    (runs.agent_fields.McpCallIn): lengths, the id's pattern, reserved ids, strict types."""
    try:
        return McpCallIn.model_validate(arguments)
    except InvalidArguments as error:
        raise Refused(str(error)) from None
    except ValidationError as error:
        raise Refused(_first_problem(error)) from None


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    field = ".".join(str(part) for part in problem["loc"]) or "the call"
    if problem["type"] == "missing":
        return f"{field} is required"
    if problem["type"] == "extra_forbidden":
        return f"unknown argument {field!r}: a call takes target, args, action_id"
    if problem["type"] == "dict_type":
        return f"{field} must be an object"
    return f"{field}: {problem['msg']}"


def _read(caller: Caller, tool, target: str, args: dict[str, Any]) -> dict:
    run = session_run(caller)
    digest = intent_digest(tool=tool.name, target=target, args=args)
    call = ToolCall(
        tool=tool.name,
        target=target,
        args=args,
        idempotency_key=f"read:{run.pk}:{digest}",
        intent_digest=digest,
    )
    policy = tool.retry_policy or DEFAULT_POLICY
    try:
        receipt, document = tool.fetch(call, timeout=policy.call_timeout)
    except tool_errors.ToolError as error:
        raise Refused(tool.redacted(f"{tool.name} could not read {target!r}: {error}")) from None
    observation_id = None
    if run.phase == Run.Phase.RUNNING:
        observation_id = str(
            observation_record(
                run=run,
                source=f"mcp:{tool.name}",
                ref=target,
                content_hash=receipt.raw_response_hash,
                summary=f"{tool.name} read {target} through the MCP gateway",
                actor=caller.actor,
            ).pk
        )
    return {
        # An upstream may echo what it was sent (a token, its own address) in its answer.
        "result": tool.redacted_answer(document),
        "run_id": str(run.pk),
        # While a write waits, the run records nothing new; the answer is still the answer.
        "observation_id": observation_id,
    }


def _write(caller: Caller, tool, target: str, args: dict, action_id: str | None) -> dict:
    """The write's envelope. A write this agent (token plus client name) already made, in
    any of its sessions, is the same intent again (same tool, target and arguments, and the
    same action_id or none): its status, or its receipt once executed, never a new request."""
    digest = intent_digest(tool=tool.name, target=target, args=args)
    if action_id is None:
        action_id = DERIVED_ID_PREFIX + digest.removeprefix("sha256:")[:32]
    with transaction.atomic():
        repeated = agent_write(agent_locked(caller), action_id=action_id, digest=digest)
        if repeated is not None:
            return outcome(_loaded(caller, repeated.pk), base_url=caller.base_url)
        return _propose(caller, tool, target, args, action_id, digest)


def _propose(caller: Caller, tool, target: str, args: dict, action_id: str, digest: str) -> dict:
    run = session_run(caller)
    try:
        action, _ = action_propose(
            run=run,
            action_id=action_id,
            tool=tool.name,
            target=target,
            args=args,
            contract_version=tool.contract_version,
            observation=latest_observation(run) or _the_request(caller, run, digest),
            proposed_by=caller.actor,
        )
    except InvalidTransition as error:
        raise Refused(_why_not(run, error)) from None
    except (RunsError, ValueError) as error:
        raise Refused(str(error)) from None
    return outcome(_loaded(caller, action.pk), base_url=caller.base_url)


def _the_request(caller: Caller, run: Run, digest: str):
    """What a write rests on when the client read nothing through Countersign first: the
    request itself, said so to the approver."""
    return observation_record(
        run=run,
        source="mcp-client",
        ref=caller.client_name or caller.session_key,
        content_hash=digest,
        summary=(
            f"The MCP client {caller.client_name or '(unnamed)'} asked for this call; "
            "it read nothing through Countersign first."
        ),
        actor=caller.actor,
    )


def _why_not(run: Run, error: InvalidTransition) -> str:
    run.refresh_from_db()
    holding = open_write(run)
    if holding is None:
        return f"{error}; countersign_start_run starts a new run for this session"
    return (
        f"this session's run holds an open write ({holding.tool} on {holding.target}, "
        f"action_id {holding.pk}): countersign_wait for its outcome first"
    )


def wait(caller: Caller, action_pk: str, timeout_s: float) -> dict:
    """The outcome of the caller's write, waiting up to timeout_s (at most MAX_WAIT_SECONDS)."""
    action = _loaded(caller, action_pk)
    seconds = min(max(timeout_s, 0), MAX_WAIT_SECONDS)
    if seconds > 0 and action.status in WAITED_ON_STATUSES:
        with long_poll_slot(caller.token, seconds):
            status = status_after_waiting(action, seconds)
        if status != action.status:
            action = _loaded(caller, action_pk)
    return outcome(action, base_url=caller.base_url, waited=True)


def status(caller: Caller, action_pk: str) -> dict:
    return outcome(_loaded(caller, action_pk), base_url=caller.base_url)


def start_run(caller: Caller, *, goal: str, budget: int | None, deadline: datetime | None) -> dict:
    try:
        run = session_start_run(caller, goal=goal, budget=budget, deadline=deadline)
    except RunsError as error:
        raise Refused(str(error)) from None
    return {
        "run_id": str(run.pk),
        "goal": run.goal,
        "run_url": f"{caller.base_url}/runs/{run.pk}/",
    }


def _loaded(caller: Caller, action_pk):
    action = action_with_decisions(action_pk, tenant=caller.token.tenant)
    if action is None:
        raise Refused(f"no action {action_pk} here")
    return action
