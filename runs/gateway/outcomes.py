"""What an MCP client is told about a write: one envelope, the same for tools/call,
countersign_wait and countersign_status, and the JSON Schema published as each write
tool's outputSchema (clients validate structuredContent against it)."""

from __future__ import annotations

from typing import Any

from runs.agent_fields import receipt_body
from runs.models import Action
from runs.selectors import latest_case
from runs.tools.registry import redacted_error

Status = Action.Status

# The envelope's `status`, from the action's; a wait that ends first says still_pending.
PENDING_APPROVAL = "pending_approval"
STILL_PENDING = "still_pending"
OUTCOMES: dict[str, str] = {
    Status.WAITING_APPROVAL: PENDING_APPROVAL,
    Status.APPROVED: "executing",
    Status.IN_FLIGHT: "executing",
    Status.RETRY_WAIT: "executing",
    Status.NEEDS_ATTENTION: "executing",
    Status.SUCCEEDED: "executed",
    Status.SATISFIED: "executed",
    Status.UNCERTAIN: "uncertain",
    Status.FAILED: "failed",
    Status.REJECTED: "rejected",
    Status.EXPIRED: "expired",
    Status.SUPERSEDED: "superseded",
    Status.CANCELLED: "cancelled",
}
SAYS = {
    PENDING_APPROVAL: (
        "Frozen and waiting for a person's approval; nothing was executed. "
        "Call countersign_wait with action_id for the outcome."
    ),
    STILL_PENDING: "No outcome yet; call countersign_wait again.",
    "executing": "Approved; a Countersign worker is executing it. Call countersign_wait.",
    "executed": "Executed once by Countersign; the receipt is its proof.",
    "uncertain": (
        "The outcome is unknown: it may or may not have happened. A person resolves it in "
        "the reconciliation case; do not try again yourself. countersign_wait holds until "
        "it is resolved."
    ),
    "failed": "It failed and was not applied; reason says why.",
    "rejected": "A person rejected it; reason says why. It was not executed.",
    "expired": "Nobody approved it in time; it was not executed.",
    "superseded": (
        "A person changed it before approving: follow superseded_by with countersign_wait."
    ),
    "cancelled": "Cancelled before it was executed.",
}

_NULLABLE_STRING = {"type": ["string", "null"]}
OUTCOME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": sorted({*OUTCOMES.values(), STILL_PENDING})},
        "message": {"type": "string"},
        "stage": {"type": "string", "description": "The action's status in Countersign."},
        "action_id": {"type": "string", "description": "Countersign's id of this intent."},
        "logical_action_id": {"type": "string"},
        "run_id": {"type": "string"},
        "tool": {"type": "string"},
        "target": {"type": "string"},
        "args": {"type": "object"},
        "intent_digest": {"type": "string"},
        "idempotency_key": {"type": "string"},
        "expires_at": _NULLABLE_STRING,
        "inbox_url": {"type": "string"},
        "receipt": {"type": ["object", "null"]},
        "reason": _NULLABLE_STRING,
        "case_url": _NULLABLE_STRING,
        "superseded_by": _NULLABLE_STRING,
    },
    "required": ["status", "message", "stage", "action_id", "intent_digest", "receipt"],
}


def outcome(action: Action, *, base_url: str, waited: bool = False) -> dict:
    """The envelope for `action` (loaded with action_with_decisions), its links under
    `base_url`; `waited` when a countersign_wait ends with the action still pending."""
    status = OUTCOMES[action.status]
    if waited and status in {PENDING_APPROVAL, "executing"}:
        status = STILL_PENDING
    case = latest_case(action) if action.status == Status.UNCERTAIN else None
    successor = getattr(action, "superseded_by", None)
    return {
        "status": status,
        "message": SAYS[status],
        "stage": action.status,
        "action_id": str(action.pk),
        "logical_action_id": action.action_id,
        "run_id": str(action.run_id),
        "tool": action.tool,
        "target": action.target,
        "args": action.args,
        "intent_digest": action.intent_digest,
        "idempotency_key": action.idempotency_key,
        "expires_at": action.expires_at.isoformat() if action.expires_at else None,
        "inbox_url": f"{base_url}/inbox/#action-{action.pk}",
        "receipt": _receipt(action),
        "reason": _reason(action),
        "case_url": f"{base_url}/reconciliation/{case['id']}/" if case else None,
        "superseded_by": str(successor.pk) if successor else None,
    }


def _receipt(action: Action) -> dict | None:
    body = receipt_body(action)
    if body is not None:
        body["created_at"] = body["created_at"].isoformat()
    return body


def _reason(action: Action) -> str | None:
    if action.status == Status.REJECTED:
        return action.decision_reason or "rejected without a reason"
    if action.status in {Status.FAILED, Status.UNCERTAIN, Status.NEEDS_ATTENTION}:
        return redacted_error(action.last_error, tool=action.tool) or None
    return None
