"""The run's completed work as a count and a running hash over its receipts.

A checkpoint must not grow with the work a run has done: it holds `{"count", "digest"}`
instead of every completed action, and the receipts stay rows. The digest chains one entry
per receipt, in the order the receipts were recorded (the order of their events), so
`completed_verify` can recompute it from the rows and prove none was edited or dropped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from control.foundation.canonical import canonical_json
from runs.models import Action, Run, RunEvent

# The digest of no completed work (the same empty-chain value as the event log's).
COMPLETED_GENESIS = "sha256:" + "0" * 64
# The events that record a receipt, each one entry of the chain.
RECEIPT_EVENTS = ("action.succeeded", "action.satisfied")


def completed_entry(
    *,
    action_id: str,
    intent_digest: str,
    status: str,
    receipt_id: str,
    idempotency_key: str,
    source: str,
    target_version: int | None,
) -> dict:
    """What one completed action contributes to the digest."""
    return {
        "action_id": action_id,
        "intent_digest": intent_digest,
        "status": status,
        "receipt_id": receipt_id,
        "idempotency_key": idempotency_key,
        "source": source,
        "target_version": target_version,
    }


def action_entry(action: Action) -> dict:
    """The entry of a completed `action` (its receipt must be loaded)."""
    receipt = action.receipt
    return completed_entry(
        action_id=action.action_id,
        intent_digest=action.intent_digest,
        status=action.status,
        receipt_id=receipt.receipt_id,
        idempotency_key=receipt.idempotency_key,
        source=receipt.source,
        target_version=receipt.target_version,
    )


def completed_next(digest: str, entry: dict) -> str:
    return "sha256:" + hashlib.sha256(digest.encode() + canonical_json(entry)).hexdigest()


def completed_fold(
    entries: Iterable[dict], *, count: int = 0, digest: str = COMPLETED_GENESIS
) -> tuple[int, str]:
    """(count, digest) after chaining `entries` onto (count, digest)."""
    for entry in entries:
        count, digest = count + 1, completed_next(digest, entry)
    return count, digest


def completed_verify(run: Run) -> list[str]:
    """Problems found; empty when the run's receipts, in the order of their events, chain to
    the count and digest stored on the run. An imported run starts from the source's."""
    count, digest = 0, COMPLETED_GENESIS
    events = (
        RunEvent.objects.filter(run=run, type__in=(*RECEIPT_EVENTS, "run.imported"))
        .select_related("action__receipt")
        .order_by("seq")
    )
    problems = []
    for event in events.iterator(chunk_size=2000):
        if event.type == "run.imported":
            base = event.payload.get("completed") or {}
            count, digest = base.get("count", 0), base.get("digest", COMPLETED_GENESIS)
            continue
        action = event.action
        if action is None or not hasattr(action, "receipt"):
            problems.append(f"event #{event.seq} records a receipt that has no row")
            continue
        count, digest = completed_fold([action_entry(action)], count=count, digest=digest)
    if (count, digest) != (run.completed_count, run.completed_digest):
        problems.append(
            f"the receipts chain to {count} completed ({digest}), "
            f"the run says {run.completed_count} ({run.completed_digest})"
        )
    return problems
