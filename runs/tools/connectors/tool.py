"""A tool built from a connector definition: the contract's declarations come from its spec.

Each kind (http, mcp, smtp) subclasses ConnectorTool and says how to perform a call, find a
receipt by key and observe a target; this class does the rest the same way for all of them:
normalization by the declared steps, the compensation and satisfied_when templates, the
frozen meaning, and secrets scrubbed from every error.
"""

from __future__ import annotations

from typing import Any

from runs.tools.base import Tool
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.connectors.definition import NORMALIZERS, ToolSpec, satisfied
from runs.tools.connectors.templates import TemplateError, call_lookup, render
from runs.tools.errors import InvalidArguments


def _normalized(value: str, steps: tuple[str, ...]) -> str:
    for step in steps:
        value = NORMALIZERS[step](value)
    return value


class ConnectorTool(Tool):
    """The declarations every kind shares. Instances are per tool; attributes per instance."""

    kind = "connector"

    def __init__(
        self,
        spec: ToolSpec,
        *,
        dedupes_by_key: bool,
        queryable_by_key: bool,
        echoes_digest: bool = True,
    ) -> None:
        self.spec = spec
        self.name = spec.name  # type: ignore[misc]
        self.kind = spec.connector.kind  # type: ignore[misc]
        self.description = spec.description  # type: ignore[misc]
        self.summary = spec.summary  # type: ignore[misc]
        self.concurrency = spec.connector.concurrency  # type: ignore[misc]
        self.contract_version = spec.contract_version  # type: ignore[misc]
        self.effect_class = spec.effect_class  # type: ignore[misc]
        self.needs_approval = spec.needs_approval  # type: ignore[misc]
        self.target_schema = spec.target_schema  # type: ignore[misc]
        self.args_schema = spec.args_schema  # type: ignore[misc]
        self.retry_policy = spec.retry_policy  # type: ignore[misc]
        self.compensation = (spec.compensation or {}).get("tool")  # type: ignore[misc]
        self.dedupes_by_key = dedupes_by_key  # type: ignore[misc]
        self.queryable_by_key = queryable_by_key  # type: ignore[misc]
        self.echoes_digest = echoes_digest  # type: ignore[misc]
        # Sending again after an unsettled uncertain outcome is safe only where one key is
        # applied once, or nothing is changed.
        self.retry_after_uncertain_allowed = (  # type: ignore[misc]
            spec.effect_class == "read_only"
            or (dedupes_by_key and spec.effect_class == "idempotent")
        )

    @property
    def connector(self) -> str:
        return self.spec.connector.name

    def prepare_target(self, target: str) -> str:
        return _normalized(target, self.spec.normalize_target)

    def prepare_args(self, args: dict[str, Any]) -> dict[str, Any]:
        for name, steps in self.spec.normalize_args.items():
            value = args.get(name)
            if isinstance(value, str):
                args[name] = _normalized(value, steps)
            elif isinstance(value, list):  # an array of strings: each item
                args[name] = [
                    _normalized(item, steps) if isinstance(item, str) else item for item in value
                ]
        return args

    def definition(self) -> dict[str, Any]:
        return self.spec.meaning

    def redacted(self, text: str) -> str:
        return self.spec.connector.secrets.scrub(text)

    def redacted_answer(self, document: Any) -> Any:
        return self.spec.connector.secrets.scrub_answer(document)

    # The external system, scrubbed of secrets.

    def execute(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        self.check_call(call)
        with self.spec.connector.secrets.scrubbed():
            return self.perform(call, timeout=timeout)

    def fetch(self, call: ToolCall, *, timeout: Timeout) -> tuple[ToolReceipt, Any]:
        self.check_call(call)
        with self.spec.connector.secrets.scrubbed():
            return self.fetched(call, timeout=timeout)

    def query(
        self, idempotency_key: str, *, timeout: Timeout, intent_digest: str | None = None
    ) -> ToolReceipt | None:
        if not self.queryable_by_key:
            return super().query(idempotency_key, timeout=timeout)
        with self.spec.connector.secrets.scrubbed():
            return self.find(idempotency_key, timeout=timeout, intent_digest=intent_digest)

    def read(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        with self.spec.connector.secrets.scrubbed():
            return self.observe(target, timeout=timeout)

    def perform(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        raise NotImplementedError

    def fetched(self, call: ToolCall, *, timeout: Timeout) -> tuple[ToolReceipt, Any]:
        """perform's receipt and the document it was read from; the receipt alone unless
        the kind keeps the answer."""
        receipt = self.perform(call, timeout=timeout)
        return receipt, receipt.to_dict()

    def find(
        self, idempotency_key: str, *, timeout: Timeout, intent_digest: str | None
    ) -> ToolReceipt | None:
        raise NotImplementedError

    def observe(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        return None

    def reads_target(self) -> bool:
        return False  # a kind that observes says when it does

    def is_satisfied(self, *, target: str, args: dict[str, Any], state: dict[str, Any]) -> bool:
        return satisfied(self.spec.satisfied_when, state)

    def can_be_satisfied(self) -> bool:
        return self.spec.satisfied_when is not None

    def compensation_call(
        self, *, receipt: ToolReceipt, args: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        template = self.spec.compensation
        if template is None:
            return super().compensation_call(receipt=receipt, args=args)
        receipt_values = {
            "receipt.id": receipt.receipt_id,
            "receipt.status": receipt.status,
            "receipt.version": receipt.target_version,
        }
        by_call = call_lookup(tool=self.name, target=None, args=args, key=None, digest=None)

        def lookup(name: str) -> Any:
            return receipt_values[name] if name in receipt_values else by_call(name)

        try:
            target = render(template["target"], lookup)
            compensation_args = render(template["args"], lookup)
        except TemplateError as error:
            raise InvalidArguments(
                f"cannot build the compensation: {error}", field="args"
            ) from error
        if not isinstance(target, str):
            raise InvalidArguments("the compensation's target is not a string", field="target")
        return target, compensation_args
