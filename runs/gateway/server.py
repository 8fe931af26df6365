"""The MCP server of the gateway, on the official SDK's low-level Server: tools/list shows
the tenant's catalog plus the gateway's own tools, tools/call runs runs.gateway.calls.

One Server is built per request for one Caller. Handlers are coroutines; the database work
runs through sync_to_async (thread-sensitive), so under the Django view it runs in the
request's own thread and connection.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from datetime import datetime
from importlib.metadata import version
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from mcp.server.lowlevel import Server

from control.api_kit.limits import ApiLimited
from runs.agent_fields import ACTION_ID_PATTERN
from runs.gateway import calls
from runs.gateway.outcomes import OUTCOME_SCHEMA
from runs.gateway.sessions import Caller, session_seen
from runs.limits import GOAL_MAX_CHARS

logger = logging.getLogger(__name__)
SERVER_NAME = "countersign"
SERVER_VERSION = version("countersign")
INSTRUCTIONS = """\
Countersign holds every write for a person's approval and executes it once, itself.
Calling a write tool never executes it here: the answer comes at once with status
pending_approval and an action_id. Call countersign_wait(action_id) for the outcome:
executed (with the receipt), rejected (with the reason), expired, or uncertain (a person
resolves it; do not try again yourself). Calling the same tool with the same arguments
again returns the same intent and, once executed, the same receipt.
"""
WRITE_NOTE = (
    "Through Countersign: frozen and held for a person's approval; answers at once with "
    "status pending_approval and an action_id for countersign_wait. The same call again "
    "returns the same intent, never a second execution."
)
INTERNAL_ERROR = (
    "Countersign could not answer this call: an internal error, logged on the server. "
    "Call again later, or ask the people who run it."
)
READ_NOTE = "Read-only: answered at once and recorded as an observation of this session's run."

_ACTION_ID = {"type": "string", "minLength": 1, "description": "The action_id a write returned."}
_RUN_SCHEMA = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string"},
        "goal": {"type": "string"},
        "run_url": {"type": "string"},
    },
    "required": ["run_id", "goal", "run_url"],
}
GATEWAY_TOOLS = [
    types.Tool(
        name="countersign_wait",
        description=(
            "Wait up to timeout_s seconds (at most 50) for a write's outcome: executed with "
            "its receipt, rejected with the reason, expired, uncertain with the case link; "
            "still_pending when there is none yet."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "action_id": _ACTION_ID,
                "timeout_s": {"type": "number", "minimum": 0, "maximum": 50, "default": 25},
            },
            "required": ["action_id"],
            "additionalProperties": False,
        },
        output_schema=OUTCOME_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    ),
    types.Tool(
        name="countersign_status",
        description="A write's status and outcome now, without waiting.",
        input_schema={
            "type": "object",
            "properties": {"action_id": _ACTION_ID},
            "required": ["action_id"],
            "additionalProperties": False,
        },
        output_schema=OUTCOME_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True),
    ),
    types.Tool(
        name="countersign_start_run",
        description=(
            "Start a new run for this session's next calls, with a goal the approvers read, "
            "an optional budget (tool calls) and deadline (ISO 8601 with a time zone)."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "goal": {"type": "string", "minLength": 1, "maxLength": GOAL_MAX_CHARS},
                "budget": {"type": "integer", "minimum": 1},
                "deadline": {"type": "string", "format": "date-time"},
            },
            "required": ["goal"],
            "additionalProperties": False,
        },
        output_schema=_RUN_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    ),
]


def build_server(caller: Caller) -> Server:
    async def list_tools(ctx, params) -> types.ListToolsResult:
        entries = await sync_to_async(calls.latest_tools)(caller)
        return types.ListToolsResult(tools=[*map(catalog_tool, entries), *GATEWAY_TOOLS])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            document = await sync_to_async(dispatch)(caller, params.name, params.arguments or {})
        except calls.Refused as refusal:
            return _error(str(refusal))
        except ApiLimited as limited:
            return _error(f"{limited.detail}; wait before calling again")
        except Exception:
            # The SDK would send a handshake-era client the exception's own text (a
            # database's, a connector's): as the API does, only the log gets the details.
            logger.exception("MCP tools/call %s failed", params.name)
            return _error(INTERNAL_ERROR)
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(document, indent=1))],
            structured_content=document,
        )

    return Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def dispatch(caller: Caller, name: str, arguments: dict[str, Any]) -> dict:
    """One tools/call, synchronously: a gateway tool or a catalog tool."""
    session_seen(caller)
    gateway_tool = _GATEWAY_CALLS.get(name)
    if gateway_tool is not None:
        return gateway_tool(caller, arguments)
    entry = next((e for e in calls.latest_tools(caller) if e["name"] == name), None)
    if entry is None:
        raise calls.Refused(f"no tool {name!r} here: tools/list shows what there is")
    return calls.call_tool(caller, entry, arguments)


def catalog_tool(entry: dict[str, Any]) -> types.Tool:
    """A catalog entry (tool_catalog) as MCP shows it: target and args as declared."""
    properties = {
        "target": _embedded(entry["target_schema"]),
        "args": _embedded(entry["args_schema"]),
    }
    required = ["target"]
    if entry["args_schema"].get("required"):
        required.append("args")
    read = calls.is_read(entry)
    if not read:
        properties["action_id"] = {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "pattern": ACTION_ID_PATTERN,
            "description": (
                "Your logical id for this write; by default the tool and arguments. A new id "
                "is a new intent; the same id and arguments again are the same intent."
            ),
        }
    description = " ".join(filter(None, [entry["description"], READ_NOTE if read else WRITE_NOTE]))
    return types.Tool(
        name=entry["name"],
        description=description,
        input_schema={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        output_schema=None if read else OUTCOME_SCHEMA,
        annotations=_annotations(entry["effect_class"]),
    )


def _annotations(effect_class: str) -> types.ToolAnnotations:
    """The hints an effect class gives: what the underlying tool does to its system."""
    return types.ToolAnnotations(
        read_only_hint=effect_class == "read_only",
        destructive_hint=effect_class in {"reconcilable", "not_retriable"},
        idempotent_hint=effect_class in {"read_only", "idempotent"},
        open_world_hint=True,
    )


def _embedded(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's own schema inside ours: `$schema` belongs at a document's root only."""
    inner = copy.deepcopy(schema)
    inner.pop("$schema", None)
    return inner


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _wait(caller: Caller, arguments: dict[str, Any]) -> dict:
    _only(arguments, {"action_id", "timeout_s"})
    timeout = arguments.get("timeout_s", 25)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        raise calls.Refused("timeout_s must be a number of seconds from 0 to 50")
    return calls.wait(caller, _action_id(arguments), float(timeout))


def _status(caller: Caller, arguments: dict[str, Any]) -> dict:
    _only(arguments, {"action_id"})
    return calls.status(caller, _action_id(arguments))


def _start_run(caller: Caller, arguments: dict[str, Any]) -> dict:
    _only(arguments, {"goal", "budget", "deadline"})
    goal, budget, deadline = (arguments.get(name) for name in ("goal", "budget", "deadline"))
    if not isinstance(goal, str) or not goal.strip():
        raise calls.Refused("goal is required: what this run is for, in words")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise calls.Refused("budget must be a whole number of tool calls")
    return calls.start_run(caller, goal=goal, budget=budget, deadline=_deadline(deadline))


def _deadline(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        deadline = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        deadline = None
    if deadline is None or deadline.tzinfo is None:
        raise calls.Refused("deadline must be an ISO 8601 date and time with a time zone")
    return deadline


def _action_id(arguments: dict[str, Any]) -> str:
    value = arguments.get("action_id")
    if not isinstance(value, str) or not value.strip():
        raise calls.Refused("action_id is required: the one a write returned")
    return value.strip()


def _only(arguments: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        raise calls.Refused(f"unknown argument {unknown[0]!r}; this tool takes {sorted(allowed)}")


_GATEWAY_CALLS: dict[str, Callable[[Caller, dict[str, Any]], dict]] = {
    "countersign_wait": _wait,
    "countersign_status": _status,
    "countersign_start_run": _start_run,
}
