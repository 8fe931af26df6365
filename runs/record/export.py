"""A run's export: its latest signed checkpoint and what it signs only by digest.

A checkpoint signs a plan's items as a chain of their digests (runs.record.carry), not their
arguments, and a large run plan or versions as a digest (`detached`), so that its size does
not grow with them. The export carries each remaining item whole, and the detached data,
beside the envelope; an import recomputes the chain, each item's digest and key, and each
detached digest, and refuses anything the signed state does not commit to. A run with
neither exports the bare envelope, as it always has.
"""

from __future__ import annotations

from control.foundation.canonical import (
    canonical_json,
    content_hash,
    idempotency_key,
    intent_digest,
)
from control.foundation.strictjson import StrictJSONError, parse_strict
from runs.exceptions import CheckpointError
from runs.models import Checkpoint, Run
from runs.record.binding import INTENT_FIELDS
from runs.record.carry import plan_chain, plan_entry
from runs.record.checkpoints import checkpoint_verify

EXPORT_FORMAT = "countersign.run-export/1"
EXPORT_KEYS = frozenset({"format", "checkpoint", "plan_items", "detached"})
# An item whole: what the worker would send (the fields the send-time check compares), and
# its place in the plan.
ITEM_FIELDS = ("position", *(field for field in INTENT_FIELDS if field != "run_id"))


def export_text(run: Run, checkpoint: Checkpoint) -> str:
    """The file an export writes for `checkpoint` (the run's latest, verified by the caller)."""
    state = checkpoint_verify(checkpoint.body)
    open_plan = state["open_plan"]
    if open_plan is None and not state["detached"]:
        return checkpoint.body
    items = []
    if open_plan is not None:
        items = list(
            run.actions.filter(plan_id=open_plan["id"], position__gte=open_plan["from_position"])
            .order_by("position")
            .values(*ITEM_FIELDS)
        )
        for item in items:
            item["id"] = str(item["id"])
        # Rows edited since they were signed never leave.
        plan_items_verify(open_plan, items, run_id=str(run.pk))
    detached = {field: getattr(run, field) for field in state["detached"]}
    _detached_verify(state, detached)
    document = {
        "format": EXPORT_FORMAT,
        "checkpoint": parse_strict(checkpoint.body),
        "plan_items": items,
        "detached": detached,
    }
    return canonical_json(document).decode()


def import_verify(data: str | bytes) -> tuple[dict, list[dict]]:
    """(the verified state with its detached data in place, the plan's remaining items) of an
    export; CheckpointError naming the step that refused it."""
    try:
        document = parse_strict(data)
    except StrictJSONError as error:
        raise CheckpointError("parse", str(error)) from None
    if not (isinstance(document, dict) and "format" in document):
        state = checkpoint_verify(data)
        if state["open_plan"] is not None:
            raise CheckpointError(
                "export",
                f"the run's plan has {state['open_plan']['items']} remaining items and this "
                "file carries none: import the file export_checkpoint wrote",
            )
        if state["detached"]:
            raise CheckpointError(
                "export",
                f"the checkpoint signs {sorted(state['detached'])} by digest and this file "
                "carries none: import the file export_checkpoint wrote",
            )
        return state, []
    if document.get("format") != EXPORT_FORMAT or set(document) != EXPORT_KEYS:
        raise CheckpointError(
            "export", f"expected format {EXPORT_FORMAT!r} with keys {sorted(EXPORT_KEYS)}"
        )
    state = checkpoint_verify(canonical_json(document["checkpoint"]))
    items, detached = document["plan_items"], document["detached"]
    if not isinstance(items, list) or not isinstance(detached, dict):
        raise CheckpointError("export", "plan_items must be a list and detached an object")
    if state["open_plan"] is not None:
        plan_items_verify(state["open_plan"], items, run_id=state["run_id"])
        if items[0]["id"] != state["pending_action"]["id"]:
            raise CheckpointError(
                "export", "the plan's first remaining item is not the pending one"
            )
    elif items:
        raise CheckpointError("export", "plan_items given for a run without an open plan")
    _detached_verify(state, detached)
    return {**state, **detached}, items


def _detached_verify(state: dict, detached: dict) -> None:
    if set(detached) != set(state["detached"]):
        raise CheckpointError("export", f"detached must hold exactly {sorted(state['detached'])}")
    for field, value in detached.items():
        data = canonical_json(value)
        if content_hash(data) != state["detached"][field]["digest"]:
            raise CheckpointError("export", f"the detached {field} is not the one signed")


def plan_items_verify(open_plan: dict, items: list, *, run_id: str) -> None:
    """Each item must be whole, fingerprint to its own digest and key, and the chain over
    them must be the link the checkpoint signed."""
    for index, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != set(ITEM_FIELDS):
            raise CheckpointError("export", f"plan_items[{index}] must hold {list(ITEM_FIELDS)}")
        try:
            fits = item["intent_digest"] == intent_digest(
                tool=item["tool"], target=item["target"], args=item["args"]
            ) and item["idempotency_key"] == idempotency_key(
                run_id=run_id,
                action_id=item["action_id"],
                target=item["target"],
                contract_version=item["contract_version"],
            )
        except (TypeError, ValueError, AttributeError):
            fits = False
        if not fits:
            raise CheckpointError(
                "export", f"plan_items[{index}] does not match its own digest and key"
            )
    if len(items) != open_plan["items"] or (
        plan_chain([plan_entry(item) for item in items])[0] != open_plan["items_hash"]
    ):
        raise CheckpointError("export", "the plan's items are not the ones the checkpoint signed")
