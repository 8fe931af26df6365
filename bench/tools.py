"""`bench.noop`: an in-process idempotent tool that does nothing, for the benchmark.

It lets `manage.py bench` measure Countersign's own execution path (lease, grant check,
attempt, receipt, events, checkpoints) without an HTTP round trip to the sandbox. Its
"external system" has no state: the receipt is a pure function of the key and the digest,
so sending the same intent twice yields the same receipt, which is exactly what a
deduplicating tool promises. It is registered only where settings.COUNTERSIGN_EXTRA_TOOLS
names it (bench.settings does), never in production.
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from runs.tools.base import Tool
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.schema import DRAFT_2020_12


class BenchNoop(Tool):
    name = "bench.noop"
    description = "Does nothing, once per key: Countersign's own path without a round trip."
    needs_approval = True
    dedupes_by_key = True
    # Its effect is nothing, so "did the send under this key happen?" is always answered
    # with the receipt the send would give: a worker killed mid-batch is settled by query
    # with no person, as a ticket desk's would be, and the bench measures the batch path.
    queryable_by_key = True
    effect_class = "idempotent"
    retry_after_uncertain_allowed = True
    target_schema: ClassVar[dict[str, Any]] = {"type": "string", "pattern": "^[a-z0-9-]{1,64}$"}
    args_schema: ClassVar[dict[str, Any]] = {
        "$schema": DRAFT_2020_12,
        "title": "bench.noop arguments",
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}},
        "required": [],
        "additionalProperties": False,
    }

    def execute(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        self.check_call(call)
        return _receipt(call.idempotency_key, call.intent_digest)

    def query(
        self, idempotency_key: str, *, timeout: Timeout, intent_digest: str | None = None
    ) -> ToolReceipt | None:
        return _receipt(idempotency_key, intent_digest) if intent_digest else None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "benchmark_only": True}


class BenchRead(BenchNoop):
    """`bench.read`: the no-op as a read, needing no approval (the long-run measure's reads)."""

    name = "bench.read"
    description = "Reads nothing: the no-op as a read, needing no approval."
    needs_approval = False
    effect_class = "read_only"


def _receipt(idempotency_key: str, intent_digest: str) -> ToolReceipt:
    """The no-op's receipt: a pure function of the key and the digest."""
    digest = hashlib.sha256(f"{idempotency_key}\n{intent_digest}".encode()).hexdigest()
    return ToolReceipt(
        idempotency_key=idempotency_key,
        intent_digest=intent_digest,
        receipt_id=f"noop_{digest[:32]}",
        target_version=None,
        status="done",
        raw_response_hash=f"sha256:{digest}",
    )
