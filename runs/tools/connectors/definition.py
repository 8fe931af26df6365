"""Connector files: TOML that declares external tools, read into tools the worker can use.

    [connectors.NAME]            kind = "http" | "mcp" | "smtp" | "python", and the kind's
                                 connection fields (URLs, headers, credentials)
    [connectors.NAME.tools.TOOL] one tool, named NAME.TOOL: what every tool declares (below)
                                 and what its kind needs to call it

Files are read by runs.tools.connectors.files; each kind's module reads its own fields.

What every tool declares (ToolSpec): contract_version, effect_class, needs_approval (default:
every effect class but read_only), target_schema and args_schema (the JSON Schema subset of
runs.tools.schema), normalize (spelling-only changes: strip, lower, upper, for the target
and per argument), retry (per-tool limits and windows), compensation (the tool whose intent
undoes this one, with its target and args as templates over the receipt and args),
satisfied_when (the read state that shows the intent's goal already holds), description,
summary (one intent's sentence: runs.tools.summaries). A tool's meaning, frozen per contract
version, is its table as written, without retry, description and summary (words for people,
not what the tool does), with its connector's kind (see runs.services.definitions).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from control.foundation.redaction import redact, redact_document
from runs.tools import summaries
from runs.tools.connectors.fields import Fields
from runs.tools.connectors.templates import (
    TemplateError,
    check_placeholder,
    is_absent,
    placeholders,
    resolve_pointer,
)
from runs.tools.errors import ToolError
from runs.tools.retry import RetryPolicy
from runs.tools.schema import check_schema

EFFECT_CLASSES = ("read_only", "idempotent", "reconcilable", "not_retriable")
NORMALIZERS: dict[str, Callable[[str], str]] = {
    "strip": str.strip,
    "lower": str.lower,
    "upper": str.upper,
}
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_NOT_MEANING = ("retry", "description", "summary")


@dataclass
class Secrets:
    """The values a connector's `${VAR}`s expanded to (and the names to show instead), and
    the hosts its kind reaches: what no error of its tools may carry
    (control.foundation.redaction)."""

    names: dict[str, str] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)

    @property
    def shown(self) -> dict[str, str]:
        """Each secret's value -> the `${NAME}` shown in its place."""
        return {value: "${" + name + "}" for value, name in self.names.items()}

    def scrub(self, text: str) -> str:
        """text without the secrets, in any encoding, and without any internal address."""
        return redact(text, secrets=self.shown, hosts=self.hosts)

    def scrub_answer(self, document: Any) -> Any:
        """A tool's answer without the secrets and the connector's own hosts; its other
        URLs may be data (a ticket's link) and stay."""
        return redact_document(document, secrets=self.shown, hosts=self.hosts, addresses=False)

    def reach(self, url: str) -> None:
        """Counts url's host among the addresses no error may show."""
        host = urlsplit(url).hostname
        if host:
            self.hosts.add(host)

    @contextmanager
    def scrubbed(self) -> Iterator[None]:
        """Re-raise any ToolError with the secrets and addresses taken out of its message."""
        try:
            yield
        except ToolError as error:
            error.message = self.scrub(error.message)
            error.args = tuple(
                self.scrub(arg) if isinstance(arg, str) else arg for arg in error.args
            )
            raise


@dataclass(frozen=True)
class ConnectorSpec:
    name: str
    kind: str
    file: str
    description: str
    secrets: Secrets
    concurrency: int = 1


@dataclass(frozen=True)
class ToolSpec:
    """What one tool of a connector declares, whatever its kind."""

    connector: ConnectorSpec
    name: str
    contract_version: str
    effect_class: str
    needs_approval: bool
    target_schema: dict[str, Any]
    args_schema: dict[str, Any]
    normalize_target: tuple[str, ...]
    normalize_args: dict[str, tuple[str, ...]]
    retry_policy: RetryPolicy | None
    compensation: dict[str, Any] | None
    satisfied_when: tuple[str, Any] | None
    description: str
    summary: str
    meaning: dict[str, Any]


# A kind reads its connector's connection fields and returns how to build each tool from
# (label, the tool's fields, the tool's table as written).
ToolBuilder = Callable[[str, Fields, dict[str, Any]], Any]
KindBuilder = Callable[[ConnectorSpec, Fields], ToolBuilder]


def tool_spec(connector: ConnectorSpec, label: str, fields: Fields, raw_table: Any) -> ToolSpec:
    """The declarations every kind's tool makes, read from its table."""
    tool_name = fields.string("tool", label)
    if not _NAME.fullmatch(tool_name):
        raise fields.error("tool", "a tool name is lower case letters, digits, _ and -")
    effect_class = fields.string("effect_class", choices=EFFECT_CLASSES)
    target_schema = _schema(fields, "target_schema", "string")
    args_schema = _schema(fields, "args_schema", "object")
    normalize_target, normalize_args = _normalizers(fields, args_schema)
    meaning = {key: value for key, value in raw_table.items() if key not in _NOT_MEANING}
    return ToolSpec(
        connector=connector,
        name=f"{connector.name}.{tool_name}",
        contract_version=fields.string("contract_version"),
        effect_class=effect_class,
        needs_approval=fields.boolean("needs_approval", effect_class != "read_only"),
        target_schema=target_schema,
        args_schema=args_schema,
        normalize_target=normalize_target,
        normalize_args=normalize_args,
        retry_policy=_retry_policy(fields),
        compensation=_compensation(fields, args_schema),
        satisfied_when=_satisfied_when(fields),
        description=fields.string("description", ""),
        summary=_summary(fields, args_schema),
        meaning={"kind": connector.kind, **meaning},
    )


def _summary(fields: Fields, args_schema: dict[str, Any]) -> str:
    summary = fields.string("summary", "")
    try:
        summaries.check(summary, args_schema)
    except summaries.SummaryError as error:
        raise fields.error("summary", str(error)) from error
    return summary


def _schema(fields: Fields, name: str, kind: str) -> dict[str, Any]:
    schema = fields.raw(name)
    if not isinstance(schema, dict):
        raise fields.error(name, "must be a table (a JSON Schema)")
    try:
        check_schema(schema)
    except TypeError as error:
        raise fields.error(name, str(error)) from error
    if schema["type"] != kind:
        raise fields.error(name, f"must have type {kind!r}")
    return schema


def _normalizers(
    fields: Fields, args_schema: dict[str, Any]
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    table = fields.table("normalize", None)
    if table is None:
        return ("strip",), {}

    def steps(owner: Fields, name: str) -> tuple[str, ...]:
        chosen = owner.strings(name)
        unknown = [step for step in chosen if step not in NORMALIZERS]
        if unknown:
            raise owner.error(name, f"unknown step {unknown[0]!r} (known: strip, lower, upper)")
        return tuple(chosen)

    target = steps(table, "target") if table.has("target") else ("strip",)
    args: dict[str, tuple[str, ...]] = {}
    args_table = table.table("args", None)
    if args_table is not None:
        for name in list(args_table.data):
            if not _holds_strings(args_schema.get("properties", {}).get(name, {})):
                raise args_table.error(
                    name, "normalizes only a string argument of args_schema, or an array of them"
                )
            args[name] = steps(args_table, name)
        args_table.done()
    table.done()
    return target, args


def _holds_strings(schema: dict[str, Any]) -> bool:
    """A string, or an array of strings: what the normalize steps spell."""
    if schema.get("type") == "array":
        schema = schema.get("items", {})
    return schema.get("type") == "string"


def _retry_policy(fields: Fields) -> RetryPolicy | None:
    table = fields.table("retry", None)
    if table is None:
        return None
    defaults = RetryPolicy()
    attempts_table = table.table("max_attempts", None)
    attempts = dict(defaults.max_attempts)
    if attempts_table is not None:
        attempts = {
            name: attempts_table.integer(name, minimum=1) for name in list(attempts_table.data)
        }
    timeout = table.raw("call_timeout", list(defaults.call_timeout))
    try:
        policy = RetryPolicy(
            max_attempts=attempts,
            base_delay=table.number("base_delay", defaults.base_delay),
            max_delay=table.number("max_delay", defaults.max_delay),
            call_timeout=tuple(timeout) if isinstance(timeout, list) else timeout,
            total_deadline=table.number("total_deadline", defaults.total_deadline),
        )
    except (TypeError, ValueError) as error:
        raise fields.error("retry", str(error)) from error
    table.done()
    return policy


def _compensation(fields: Fields, args_schema: dict[str, Any]) -> dict[str, Any] | None:
    table = fields.table("compensation", None)
    if table is None:
        return None
    compensation = {
        "tool": table.string("tool"),
        "target": table.string("target"),
        "args": table.raw("args", {}),
    }
    table.done()
    check_template(table, "target", compensation["target"], args_schema, receipt=True)
    check_template(table, "args", compensation["args"], args_schema, receipt=True)
    return compensation


def _satisfied_when(fields: Fields) -> tuple[str, Any] | None:
    table = fields.table("satisfied_when", None)
    if table is None:
        return None
    pointer = table.string("pointer")
    try:
        check_placeholder(pointer, pointers=True)
    except TemplateError as error:
        raise table.error("pointer", str(error)) from error
    condition = (pointer, table.raw("equals"))
    table.done()
    return condition


def check_template(
    fields: Fields,
    name: str,
    template: Any,
    args_schema: dict[str, Any],
    *,
    pointers: bool = False,
    receipt: bool = False,
) -> None:
    """Refuse a template whose placeholders the call will not have."""
    try:
        for placeholder in placeholders(template):
            check_placeholder(placeholder, pointers=pointers, receipt=receipt)
            if placeholder.startswith("args."):
                argument = placeholder.split(".")[1]
                if argument not in args_schema.get("properties", {}):
                    raise TemplateError(f"{{{placeholder}}} names no argument of args_schema")
    except TemplateError as error:
        raise fields.error(name, str(error)) from error


def satisfied(condition: tuple[str, Any] | None, state: Any) -> bool:
    if condition is None:
        return False
    value = resolve_pointer(state, condition[0])
    return not is_absent(value) and value == condition[1]
