"""The `mcp` kind: tools that are tools of an upstream MCP server (see docs/CONNECTORS.md).

Connection fields: command (a list of strings: the server started over stdio, with
optional env, added to a minimal inherited environment, and cwd) or url (Streamable HTTP,
with optional headers, and max_response_bytes: the most of any one answer read, default
1 MiB); connect_timeout (seconds to start or reach the server and finish its handshake,
default 15) and timeout (seconds for one call, default 30). These two bound
every call of the connector's tools, so a tool declares no retry.call_timeout.

Tool fields: upstream_tool (the server's tool this one calls; default: the label),
target_argument (the upstream argument that receives the frozen target; absent: the target
is not sent, it only names what the call changes), probe ({tool, arguments}: a read tool of
the same server, arguments a template over {target}; its answer is read(target)). The
call's upstream arguments are its args (validated by args_schema), plus the target under
target_argument.

MCP has no idempotency keys: a tool of this kind neither dedupes by key nor can be queried
by key, and its receipt cannot echo the intent digest (the proof is the key alone). The
declared effect_class decides what an uncertain outcome allows.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from control.foundation.canonical import canonical_json, content_hash
from runs.tools.bounded import DEFAULT_MAX_RESPONSE_BYTES
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.connectors.definition import ConnectorSpec, ToolSpec, tool_spec
from runs.tools.connectors.fields import Fields
from runs.tools.connectors.mcp_upstream import (
    Lost,
    NotListed,
    NotSent,
    Refused,
    Server,
    call_tool,
)
from runs.tools.connectors.templates import TemplateError, call_lookup, placeholders, render
from runs.tools.connectors.tool import ConnectorTool
from runs.tools.errors import (
    BusinessRejection,
    InvalidArguments,
    ResultUncertain,
    TransientError,
    UnsupportedTool,
)

_DEFAULT_CONNECT_TIMEOUT = 15.0
_DEFAULT_CALL_TIMEOUT = 30.0


@dataclass(frozen=True)
class Connection:
    server: Server
    connect_timeout: float
    timeout: float


@dataclass(frozen=True)
class Probe:
    """A read tool of the same server, and its arguments as a template over {target}."""

    tool: str
    arguments: dict[str, Any]


def connection(spec: ConnectorSpec, fields: Fields) -> Any:
    shared = Connection(
        server=_server(spec, fields),
        connect_timeout=fields.number("connect_timeout", _DEFAULT_CONNECT_TIMEOUT, minimum=1),
        timeout=fields.number("timeout", _DEFAULT_CALL_TIMEOUT, minimum=1),
    )

    def build(label: str, tool_fields: Fields, raw: dict[str, Any]) -> McpTool:
        return McpTool(tool_spec(spec, label, tool_fields, raw), tool_fields, label, shared)

    return build


def _server(spec: ConnectorSpec, fields: Fields) -> Server:
    if fields.has("command") == fields.has("url"):
        both = fields.has("command")
        raise fields.error(
            "url" if both else None,
            "give command or url, not both"
            if both
            else "needs command (a server started over stdio) or url (Streamable HTTP)",
        )
    if fields.has("url"):
        url = fields.string("url")
        if not url.startswith(("http://", "https://")):
            raise fields.error("url", "must start with http:// or https://")
        spec.secrets.reach(url)
        for name in ("env", "cwd"):
            if fields.has(name):
                raise fields.error(name, "is for a command; a url server takes headers")
        return Server(
            url=url,
            headers=tuple(sorted(fields.string_map("headers").items())),
            max_response_bytes=fields.integer(
                "max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES, minimum=1
            ),
            shown=spec.secrets.scrub(url),
        )
    command = fields.strings("command")
    if not command or not command[0]:
        raise fields.error("command", "must be the program and its arguments, program first")
    for name in ("headers", "max_response_bytes"):
        if fields.has(name):
            raise fields.error(name, "is for a url; a command server takes env")
    return Server(
        command=tuple(command),
        env=tuple(sorted(fields.string_map("env").items())),
        cwd=fields.string("cwd", None),
        shown=spec.secrets.scrub(shlex.join(command)),
    )


def _probe(fields: Fields) -> Probe | None:
    table = fields.table("probe", None)
    if table is None:
        return None
    probe = Probe(tool=table.string("tool"), arguments=table.raw("arguments", {}))
    if not isinstance(probe.arguments, dict):
        raise table.error("arguments", "must be a table")
    try:
        for name in placeholders(probe.arguments):
            if name != "target":
                raise TemplateError(f"{{{name}}} has no value in a probe, which reads a target")
    except TemplateError as error:
        raise table.error("arguments", str(error)) from error
    table.done()
    return probe


class McpTool(ConnectorTool):
    kind = "mcp"

    def __init__(self, spec: ToolSpec, fields: Fields, label: str, connection: Connection) -> None:
        if "call_timeout" in (fields.data.get("retry") or {}):
            raise fields.error(
                "retry.call_timeout",
                "an mcp tool's calls are bounded by its connector's connect_timeout and timeout",
            )
        self.connection = connection
        self.upstream_tool = fields.string("upstream_tool", label)
        self.target_argument = fields.string("target_argument", None)
        if self.target_argument in spec.args_schema.get("properties", {}):
            raise fields.error(
                "target_argument",
                f"{self.target_argument!r} is also a property of args_schema; the target is "
                "sent as that argument, so the args cannot hold it too",
            )
        self.probe = _probe(fields)
        if spec.satisfied_when is not None and self.probe is None:
            raise fields.error("satisfied_when", "needs a probe: its answer is the state it reads")
        super().__init__(spec, dedupes_by_key=False, queryable_by_key=False, echoes_digest=False)

    def perform(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        return self.fetched(call, timeout=timeout)[0]

    def fetched(self, call: ToolCall, *, timeout: Timeout) -> tuple[ToolReceipt, Any]:
        arguments = dict(call.args)
        if self.target_argument is not None:
            arguments[self.target_argument] = call.target
        changes = self.effect_class != "read_only"
        result = self._call(self.upstream_tool, arguments, changes=changes)
        if result.is_error:
            raise BusinessRejection(f"{self.upstream_tool} refused: {_text(result)}")
        try:
            raw_hash = content_hash(canonical_json(_document(result)))
        except ValueError as error:
            if not changes:
                raise TransientError(f"{self.upstream_tool} answered: {error}") from error
            raise ResultUncertain(f"{self.upstream_tool} answered: {error}") from error
        receipt = ToolReceipt(
            idempotency_key=call.idempotency_key,
            intent_digest=call.intent_digest,
            receipt_id="mcp_" + raw_hash.removeprefix("sha256:")[:32],
            target_version=None,
            status="ok",
            raw_response_hash=raw_hash,
        )
        return receipt, _shown(result)

    def reads_target(self) -> bool:
        return self.probe is not None

    def observe(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        if self.probe is None:
            return None
        lookup = call_lookup(tool=self.name, target=target, args={}, key=None, digest=None)
        result = self._call(self.probe.tool, render(self.probe.arguments, lookup), changes=False)
        if result.is_error:
            raise TransientError(f"the probe {self.probe.tool} refused: {_text(result)}")
        state: dict[str, Any] = {"probe": self.probe.tool, "text": _text(result)}
        if result.structured_content is not None:
            state["structured"] = result.structured_content
        return state

    def _call(self, name: str, arguments: dict[str, Any], *, changes: bool) -> Any:
        """The upstream's CallToolResult, or the ToolError its fate allows."""
        server = self.connection.server
        try:
            return call_tool(
                server,
                name,
                arguments,
                connect_timeout=self.connection.connect_timeout,
                call_timeout=self.connection.timeout,
            )
        except NotSent as error:
            raise TransientError(f"MCP server {server}: {error}; {name} was not sent") from error
        except NotListed as error:
            raise UnsupportedTool(f"MCP server {server}: {error}") from error
        except Refused as error:
            raise InvalidArguments(f"MCP server {server} refused {name}: {error}") from error
        except Lost as error:
            if not changes:
                raise TransientError(f"MCP server {server}, {name}: {error}") from error
            raise ResultUncertain(
                f"MCP server {server}, {name} was sent and may have been applied: {error}"
            ) from error


def _document(result: Any) -> dict[str, Any]:
    """The whole result as it came over the wire."""
    return result.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _shown(result: Any) -> Any:
    """What the upstream answered, as its caller would read it: structured when it is."""
    if result.structured_content is not None:
        return result.structured_content
    return {"text": _text(result)}


def _text(result: Any) -> str:
    """The result's text content; other content by its type."""
    return "\n".join(
        item.text if item.type == "text" else f"[{item.type}]" for item in result.content
    )
