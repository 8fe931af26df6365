"""A connector definition to edit, from what an upstream MCP server says about its tools
(`manage.py connectors import-mcp NAME -- COMMAND...`).

Each listed tool becomes a tool of the connector, labelled after it (lower case, other
characters as _) with upstream_tool naming it. A tool annotated readOnlyHint is read_only
and needs no approval; every other one needs approval and is not_retriable, the safe
default: MCP has no idempotency keys, so a resend may be a second effect. args_schema is
the upstream inputSchema where it fits Countersign's subset (runs/tools/schema.py):
strings, integers, booleans, objects and arrays of them, an optional value being one that
may be left out. What does not fit is said in a comment: an optional argument is left out,
a tool with a required one is printed commented out, and so is an array whose items do not
fit. No target is chosen and no probe written: comments
say what to decide.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from contextlib import AsyncExitStack
from typing import Any

from runs.tools.connectors.mcp_upstream import Server, describe_error, list_tools, run_on_loop

_CONNECTOR_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_KEPT = {
    "string": ("title", "description", "minLength", "maxLength", "pattern", "enum"),
    "integer": ("title", "description", "minimum", "maximum", "enum"),
    "boolean": ("title", "description"),
    "object": ("title", "description"),
    "array": ("title", "description", "minItems", "maxItems", "uniqueItems"),
}
# Said by the upstream for its own use: nothing for Countersign to enforce.
_IGNORED = ("default", "examples", "$schema")
_SUBSET = "Countersign's argument schemas take strings, integers, booleans, objects and arrays"


def definition_text(name: str, command: list[str], *, timeout: float = 30.0) -> str:
    """TOML for connector `name`: the tools of the server `command` starts, to edit."""
    if not _CONNECTOR_NAME.fullmatch(name):
        raise ValueError(f"{name!r}: a connector name is lower case letters, digits, _ and -")
    if not command or not command[0]:
        raise ValueError("the command that starts the server is empty")
    try:
        tools = run_on_loop(_listed(Server(command=tuple(command)), timeout), bound=timeout)
    except Exception as error:
        raise ValueError(
            f"could not list the tools of `{shlex.join(command)}`: {describe_error(error)}"
        ) from error
    lines = [
        f"# Connector {name!r}: the tools of the MCP server `{shlex.join(command)}`.",
        "# Before use: give each write its target (target_argument, target_schema) and a probe,",
        "# and check effect_class and needs_approval. See docs/CONNECTORS.md, The mcp kind.",
        "",
        f"[connectors.{name}]",
        'kind = "mcp"',
        f"command = {_toml(command)}",
    ]
    labels: set[str] = set()
    for tool in sorted(tools, key=lambda tool: tool.name):
        label = _label(tool.name, labels)
        labels.add(label)
        lines += ["", *_tool_lines(name, label, tool)]
    return "\n".join(lines) + "\n"


async def _listed(server: Server, timeout: float) -> list[Any]:
    async with asyncio.timeout(timeout), AsyncExitStack() as stack:
        return await list_tools(await server.enter(stack, timeout))


def _label(upstream: str, taken: set[str]) -> str:
    label = re.sub(r"[^a-z0-9_-]", "_", upstream.lower())
    label = (label if label[:1].isalpha() else "t_" + label)[:56]
    unique, number = label, 2
    while unique in taken:
        unique, number = f"{label}_{number}", number + 1
    return unique


def _tool_lines(connector: str, label: str, tool: Any) -> list[str]:
    read_only = bool(tool.annotations and tool.annotations.read_only_hint)
    args_schema, notes = _fit(tool.input_schema, "args")
    table = f"connectors.{connector}.tools.{label}"
    lines = [f"[{table}]"]
    if tool.description:
        lines.append(f"description = {_toml(tool.description)}")
    lines += [
        f"upstream_tool = {_toml(tool.name)}",
        'contract_version = "v1"',
        f"effect_class = {_toml('read_only' if read_only else 'not_retriable')}",
        f"needs_approval = {_toml(not read_only)}",
        'target_schema = { type = "string", minLength = 1 }',
    ]
    strings = [
        name
        for name, schema in (args_schema or {}).get("properties", {}).items()
        if schema["type"] == "string"
    ]
    if strings:
        lines.append(
            "# The target is not sent. If one of these names what the call acts on, make it"
            f' the target: {", ".join(strings)} (target_argument = "NAME"; out of args_schema).'
        )
    if not read_only:
        lines.append(
            '# probe = { tool = "A_READ_TOOL", arguments = { NAME = "{target}" } } shows'
            " reconciliation what this call did."
        )
    if args_schema is None:
        reasons = [f"# not imported: {note}" for note in notes]
        return reasons + [f"# {line}" if not line.startswith("#") else line for line in lines]
    lines += [f"# left out: {note}" for note in notes]
    lines += ["", f"[{table}.args_schema]"]
    lines += [f"{key} = {_toml(args_schema[key])}" for key in ("type", "required")]
    lines.append("additionalProperties = false")
    properties = args_schema["properties"]
    lines += [f"properties.{_key(name)} = {_toml(value)}" for name, value in properties.items()]
    if not properties:
        lines.append("properties = {}")
    return lines


def _fit(schema: Any, path: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The schema in Countersign's subset (None when it cannot be), and what was left out."""
    if not isinstance(schema, dict):
        return None, [f"{path} has no schema"]
    schema = _without_null(schema)
    kind = schema.get("type")
    if kind not in _KEPT:
        return None, [f"{path} is {_kind(schema)}; {_SUBSET} (runs/tools/schema.py)"]
    fitted: dict[str, Any] = {"type": kind}
    notes: list[str] = []
    for key, value in schema.items():
        if key in _KEPT[kind] and not (key == "pattern" and not _anchored(value)):
            fitted[key] = value
        elif key not in (
            "type",
            "properties",
            "required",
            "additionalProperties",
            "items",
            *_IGNORED,
        ):
            notes.append(f"{path}: {key} = {json.dumps(value)} (not enforced here)")
    if kind == "array":
        items, item_notes = _fit(schema.get("items"), f"{path}[]")
        if items is None:
            return None, item_notes
        return {**fitted, "items": items}, notes + item_notes
    if kind != "object":
        return fitted, notes
    required = [name for name in schema.get("required", []) if isinstance(name, str)]
    fitted["properties"] = {}
    for name, child in (schema.get("properties") or {}).items():
        needed = name in required
        child_path = f"{path}.{name}" + (" (required)" if needed else "")
        fitted_child, child_notes = _fit(child, child_path)
        if fitted_child is None and needed:
            return None, child_notes
        notes += child_notes
        if fitted_child is not None:
            fitted["properties"][name] = fitted_child
    fitted["required"] = [name for name in required if name in fitted["properties"]]
    fitted["additionalProperties"] = False
    return fitted, notes


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional value's schema (anyOf [X, null], or type [X, "null"]) as X's."""
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        others = [branch for branch in branches if branch != {"type": "null"}]
        if len(others) == 1 and len(others) < len(branches) and isinstance(others[0], dict):
            outer = {key: value for key, value in schema.items() if key != "anyOf"}
            return {**others[0], **outer}
    kind = schema.get("type")
    if isinstance(kind, list) and "null" in kind and len(kind) == 2:
        return {**schema, "type": next(item for item in kind if item != "null")}
    return schema


def _kind(schema: dict[str, Any]) -> str:
    if "type" in schema:
        return f"of type {json.dumps(schema['type'])}"
    combined = [key for key in ("anyOf", "oneOf", "allOf", "$ref") if key in schema]
    return f"a {combined[0]}" if combined else "untyped"


def _anchored(pattern: Any) -> bool:
    return isinstance(pattern, str) and pattern.startswith("^") and pattern.endswith("$")


def _key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else _toml(name)


def _toml(value: Any) -> str:
    """A TOML value for JSON data (inline tables and arrays)."""
    if isinstance(value, str):
        # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"{type(value).__name__} has no TOML form here")
