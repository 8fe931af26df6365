"""An in-process external system for the simulation: two tools over one effects ledger.

`sim.keyed` dedupes by idempotency key and can be queried by it (like the ticket desk);
`sim.plain` does neither (like the notifier). Both implement runs.tools.base.Tool, so the
worker, the protocol and reconciliation use them exactly as they use the sandbox's adapters.
The ledger is the ground truth the invariants count effects against. Faults are planned
per tool and consumed by the next call, as the sandbox's are.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, ClassVar

from runs.tools.base import Tool
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.errors import ReceiptMismatch, ResultUncertain, TransientError
from runs.tools.schema import DRAFT_2020_12

# What a provider can do to one call; "crash" kills the calling worker after the commit.
PROVIDER_FAULTS = (
    "transient",  # refused before anything happened (5xx, 429): retry with the same key
    "uncertain",  # the request vanished: nothing happened, nobody can tell
    "commit_then_drop",  # applied, then the connection dropped: unknown to the caller
    "malformed",  # applied, then an answer that is no receipt
    "mismatch",  # not applied; an answer carrying another intent's receipt
    "commit_then_503",  # applied, then a 5xx: only a tool that dedupes may send it again
    "crash",  # applied, then the worker process dies before recording anything
    "query_transient",  # the next query by key fails (the outcome stays unknown)
)


class WorkerCrash(BaseException):
    """The calling worker process died (SIGKILL): nothing after this point runs.
    A BaseException, so no `except Exception` in our code can swallow it."""


@dataclass
class Ledger:
    """What the external system did: every effect, by idempotency key."""

    effects: dict[str, list[ToolReceipt]] = field(default_factory=lambda: defaultdict(list))
    planned: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    fired: Counter = field(default_factory=Counter)

    def plan(self, tool: str, fault: str) -> None:
        self.planned[tool].append(fault)

    def clear_faults(self) -> None:
        self.planned.clear()

    def take(self, tool: str, *, kinds: tuple[str, ...]) -> str | None:
        """The oldest planned fault of `tool` among `kinds`, consumed; None if there is none."""
        queue = self.planned.get(tool, [])
        for index, fault in enumerate(queue):
            if fault in kinds:
                del queue[index]
                self.fired[fault] += 1
                return fault
        return None

    def applied(self, key: str) -> list[ToolReceipt]:
        return self.effects.get(key, [])


class SimTool(Tool):
    contract_version = "v1"
    needs_approval = True
    effect_class: ClassVar[str]
    target_schema: ClassVar[dict[str, Any]] = {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"}
    args_schema: ClassVar[dict[str, Any]] = {
        "$schema": DRAFT_2020_12,
        "title": "simulation arguments",
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}},
        "required": ["n"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.ledger = Ledger()

    def _receipt(self, call: ToolCall, *, digest: str | None = None) -> ToolReceipt:
        number = len(self.ledger.applied(call.idempotency_key)) + 1
        seed = f"{call.idempotency_key}#{number}".encode()
        return ToolReceipt(
            idempotency_key=call.idempotency_key,
            intent_digest=digest or call.intent_digest,
            receipt_id="sim_" + hashlib.sha256(seed).hexdigest()[:24],
            target_version=number,
            status="done",
            raw_response_hash="sha256:" + hashlib.sha256(seed + b"/raw").hexdigest(),
        )

    def execute(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        self.check_call(call)
        fault = self.ledger.take(self.name, kinds=PROVIDER_FAULTS[:-1])
        if fault == "transient":
            raise TransientError("503 from the provider", http_status=503)
        if fault == "uncertain":
            raise ResultUncertain("read timeout after sending")
        if fault == "mismatch":
            other = self._receipt(call, digest="sha256:" + "f" * 64)
            raise ReceiptMismatch("a receipt for another intent", receipt=other)
        receipt = self._apply(call)
        if fault == "commit_then_503":
            raise TransientError("503 after the provider committed", http_status=503)
        if fault == "commit_then_drop":
            raise ResultUncertain("connection closed after sending")
        if fault == "malformed":
            raise ResultUncertain("2xx without a receipt", raw_response_hash="sha256:" + "0" * 64)
        if fault == "crash":
            raise WorkerCrash("killed after the provider committed")
        return receipt

    def _apply(self, call: ToolCall) -> ToolReceipt:
        receipt = self._receipt(call)
        self.ledger.effects[call.idempotency_key].append(receipt)
        return receipt


class KeyedTool(SimTool):
    name = "sim.keyed"
    dedupes_by_key = True
    queryable_by_key = True
    effect_class = "idempotent"
    retry_after_uncertain_allowed = True

    def _apply(self, call: ToolCall) -> ToolReceipt:
        done = self.ledger.applied(call.idempotency_key)
        if done:
            return done[0]  # same key, same intent: the stored receipt, no second effect
        return super()._apply(call)

    def query(
        self, idempotency_key: str, *, timeout: Timeout, intent_digest: str | None = None
    ) -> ToolReceipt | None:
        if self.ledger.take(self.name, kinds=("query_transient",)):
            raise TransientError("the receipts endpoint timed out")
        done = self.ledger.applied(idempotency_key)
        return done[0] if done else None


class PlainTool(SimTool):
    name = "sim.plain"
    dedupes_by_key = False
    queryable_by_key = False
    effect_class = "not_retriable"
    retry_after_uncertain_allowed = False


SIM_TOOLS = (KeyedTool, PlainTool)
