"""The tool adapter contract: what a call is, what a receipt is, what every tool declares.

A worker holds only this contract: it asks `get_tool(name, version)` for an adapter, freezes
`normalize()`d arguments into an intent, `execute()`s the call with the intent's key and
digest, and on an uncertain outcome `query()`s by the same key or `read()`s the target.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, ClassVar

from control.foundation.canonical import canonical_json, content_hash, intent_digest
from control.foundation.redaction import redact
from runs.tools import summaries
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.errors import (
    InvalidArguments,
    ResultUncertain,
    ToolCrashed,
    ToolError,
    UnsupportedTool,
)
from runs.tools.retry import RetryPolicy
from runs.tools.schema import check_schema, validate

EFFECT_CLASSES = ("read_only", "idempotent", "reconcilable", "not_retriable")
# Effect classes whose writes may go out again once a request may have reached the system:
# the system applies one key once. For the others an answered failure is an unknown outcome.
RESENDABLE_EFFECT_CLASSES = ("read_only", "idempotent")


class Tool(ABC):
    """One external tool at one contract version. Instances are stateless and shareable."""

    name: ClassVar[str]
    contract_version: ClassVar[str] = "v1"
    needs_approval: ClassVar[bool]
    # The external side stores the key and never applies it twice: retrying is safe.
    dedupes_by_key: ClassVar[bool]
    # query(key) can find the receipt of an earlier call.
    queryable_by_key: ClassVar[bool]
    effect_class: ClassVar[str]
    # May the worker send again after an uncertain outcome that a query did not settle?
    retry_after_uncertain_allowed: ClassVar[bool]
    args_schema: ClassVar[dict[str, Any]]
    # A JSON Schema (type string) of the normalized target.
    target_schema: ClassVar[dict[str, Any]]
    # Name of the tool whose intent undoes this one, if any (see compensation_call).
    compensation: ClassVar[str | None] = None
    # Retry limits and window for this tool's transient failures; None: the worker's default.
    retry_policy: ClassVar[RetryPolicy | None] = None
    # Does the external system echo (and so prove) the intent digest in its receipt? When it
    # cannot store it, the receipt's proof is the idempotency key alone.
    echoes_digest: ClassVar[bool] = True
    # How the tool is defined: a class of its own, or a connector file's kind (http, mcp...).
    kind: ClassVar[str] = "python"
    # One line for the people who approve and reconcile its intents.
    description: ClassVar[str] = ""
    # One intent's sentence, a template over its target and args (runs.tools.summaries):
    # "Charge {args.amount_cents|money:args.currency} to {target}". "" says nothing more.
    summary: ClassVar[str] = ""
    # How many calls of this tool's connector one worker may have out at once within a
    # batch (runs.execution.drain); 1 sends them one after another.
    concurrency: ClassVar[int] = 1
    # The secrets a python connector expanded into this instance's options (value ->
    # `${NAME}`), set by that kind: Tool.redacted keeps them out of every error shown.
    shown_secrets: Mapping[str, str] = MappingProxyType({})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            return  # an intermediate base (SandboxTool), not a tool
        if cls.effect_class not in EFFECT_CLASSES:
            raise TypeError(f"{cls.__name__}.effect_class must be one of {EFFECT_CLASSES}")
        check_schema(cls.args_schema)
        check_schema(cls.target_schema)
        summaries.check(cls.summary, cls.args_schema)
        if cls.target_schema["type"] != "string" or cls.args_schema["type"] != "object":
            raise TypeError(f"{cls.__name__}: targets are strings and args are objects")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self.contract_version}>"

    @property
    def connector(self) -> str:
        """The connector this tool belongs to: its name up to the first dot."""
        return self.name.split(".", 1)[0]

    def summarize(self, *, target: str, args: dict[str, Any]) -> str:
        """What this intent will do, in the tool's words; "" when it declares no summary."""
        if not self.summary:
            return ""
        return summaries.render(self.summary, tool=self.name, target=target, args=args)

    def money_fields(self) -> dict[str, str]:
        """The arguments its summary writes as money, each with its currency's spec."""
        return summaries.money_fields(self.summary)

    def capabilities(self) -> list[str]:
        """What a person deciding about or reconciling this tool's intent should know, in words."""
        if self.effect_class == "read_only":
            return ["read only: changes nothing"]
        if self.dedupes_by_key:
            said = ["dedupes by key"]
        elif self.effect_class == "idempotent":
            # Idempotent by nature (closing a closed issue): no key needed for a resend.
            said = ["a resend changes nothing more"]
        else:
            said = ["a resend is a second effect"]
        said.append("can be queried by key" if self.queryable_by_key else "cannot be queried")
        if not self.echoes_digest:
            said.append("the receipt's proof is the key alone")
        return said

    def definition(self) -> dict[str, Any]:
        """What this tool means at its contract version: the part frozen by definition_digest.
        Connection details (URLs, credentials, timeouts, retry limits) are not part of it."""
        described = self.describe()
        return {
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            **{name: described[name] for name in _MEANING},
        }

    def definition_digest(self) -> str:
        return content_hash(canonical_json(self.definition()))

    # Normalization: the one form an intent is frozen, digested and sent in.

    def outcome_unknown_after(self, error: ToolError) -> bool:
        """Might the write that raised `error` have been applied? Always for an uncertain
        error. For a transient one, when the system answered it (5xx, 408, 429: the request
        reached it, and a server may commit and then fail) and this tool's effect class does
        not make a resend safe. The one rule for "may we send it again"; status codes only
        say whether an answer came back."""
        if isinstance(error, ResultUncertain):
            return True
        answered = error.http_status is not None
        return error.retriable and answered and self.effect_class not in RESENDABLE_EFFECT_CLASSES

    def normalize(self, *, target: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(target, args) in normal form, or InvalidArguments naming the offending field."""
        if not isinstance(target, str):
            raise InvalidArguments("target must be a string", field="target")
        normal_target = self.prepare_target(target)
        validate(self.target_schema, normal_target, path="target")
        if not isinstance(args, dict):
            raise InvalidArguments("args must be an object", field="args")
        normal_args = self.prepare_args(copy.deepcopy(args))
        validate(self.args_schema, normal_args, path="args")
        return normal_target, normal_args

    def prepare_target(self, target: str) -> str:
        """Spelling-only changes before validation (strip, case); never changes meaning."""
        return target.strip()

    def prepare_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """Spelling-only changes to well-typed values before validation; types are not fixed."""
        return args

    def check_call(self, call: ToolCall) -> None:
        """Refuse, before sending, a call that is not this tool's normalized, digested intent."""
        if call.tool != self.name:
            raise UnsupportedTool(f"{self.name} cannot execute a {call.tool!r} call")
        if self.normalize(target=call.target, args=call.args) != (call.target, call.args):
            raise InvalidArguments(f"the {self.name} call is not in normal form; normalize first")
        expected = intent_digest(tool=call.tool, target=call.target, args=call.args)
        if call.intent_digest != expected:
            raise InvalidArguments(
                "intent_digest does not match the call's tool, target and args",
                field="intent_digest",
            )

    # The external system.

    @abstractmethod
    def execute(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        """Perform the call once; raise a ToolError subclass for anything but a receipt."""

    def fetch(self, call: ToolCall, *, timeout: Timeout) -> tuple[ToolReceipt, Any]:
        """A read_only call's receipt and the document it read: what an agent calling the
        tool through the MCP gateway is shown. By default the receipt is all there is."""
        receipt = self.execute(call, timeout=timeout)
        return receipt, receipt.to_dict()

    def query(
        self, idempotency_key: str, *, timeout: Timeout, intent_digest: str | None = None
    ) -> ToolReceipt | None:
        """The receipt stored under this key, or None if the external side has none.
        intent_digest is the digest frozen with the key: a system that does not echo digests
        can only be trusted by key, and its receipt then carries this one."""
        raise UnsupportedTool(f"{self.name} cannot be queried by idempotency key")

    def read(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        """The target's current external state; None when this tool has no read."""
        return None

    def reads_target(self) -> bool:
        """Whether `read` can say anything: a card offers "Read it now" only then."""
        return type(self).read is not Tool.read

    def is_satisfied(self, *, target: str, args: dict[str, Any], state: dict[str, Any]) -> bool:
        """Does state (from read) show the intent's goal already holds?"""
        return False

    def can_be_satisfied(self) -> bool:
        """Can a read ever show the goal already holds? If not, the worker does not read first."""
        return type(self).is_satisfied is not Tool.is_satisfied

    def compensation_call(
        self, *, receipt: ToolReceipt, args: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """(target, args) of the `compensation` tool's intent that undoes this receipt."""
        raise UnsupportedTool(f"{self.name} has no compensation")

    def redacted(self, text: str) -> str:
        """text (an error of this tool) as anyone may read it: no internal address, and none
        of the secrets its connector file gave it (control.foundation.redaction); a
        declarative kind's tool also takes its connector's hosts out."""
        return redact(text, secrets=self.shown_secrets)

    @contextmanager
    def contained(self) -> Iterator[None]:
        """Around every call a worker or a probe makes to this tool (execute, query, read):
        anything it raises that is not a ToolError becomes ToolCrashed, scrubbed, so no
        exception of a tool leaves an action in flight with nothing recorded."""
        try:
            yield
        except ToolError:
            raise
        except Exception as error:
            described = f"{self.name} raised {type(error).__name__}: {error}"
            raise ToolCrashed(self.redacted(described)[:2000]) from error

    def redacted_answer(self, document: Any) -> Any:
        """A read's answer as an agent may read it; a tool that knows no secrets keeps it."""
        return document

    def describe(self) -> dict[str, Any]:
        """What GET /api/v1/tools shows of this tool."""
        return {
            "name": self.name,
            "contract_version": self.contract_version,
            "needs_approval": self.needs_approval,
            "dedupes_by_key": self.dedupes_by_key,
            "queryable_by_key": self.queryable_by_key,
            "effect_class": self.effect_class,
            "compensation": self.compensation,
            "echoes_digest": self.echoes_digest,
            "connector": self.connector,
            "kind": self.kind,
            "description": self.description,
            "summary": self.summary,
            "capabilities": self.capabilities(),
            "target_schema": copy.deepcopy(self.target_schema),
            "args_schema": copy.deepcopy(self.args_schema),
        }


# The described fields that make up a tool's meaning (Tool.definition).
_MEANING = (
    "name",
    "contract_version",
    "needs_approval",
    "dedupes_by_key",
    "queryable_by_key",
    "effect_class",
    "compensation",
    "echoes_digest",
    "target_schema",
    "args_schema",
)
