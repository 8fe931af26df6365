"""The rows a worker is about to execute must be exactly what the latest signed checkpoint says.

The checkpoint's MAC protects the intent (tool, target, canonical args, contract version, key,
digest) and the grants it rests on (digest, state version, scope, expiry, approvers) against
anyone who can write to the database but does not hold the signing key. Verifying the MAC is
not enough: the Action and Approval rows are what gets sent and checked, so they are compared
with the verified state before every send. Any difference refuses the send.
"""

from __future__ import annotations

from control.foundation.canonical import canonical_json
from runs.models import Action, Approval
from runs.record.checkpoints import approval_state, pending_action_state

# The fields of a pending intent that decide what is sent, and under which key.
INTENT_FIELDS = (
    "id",
    "run_id",
    "action_id",
    "tool",
    "target",
    "args",
    "contract_version",
    "idempotency_key",
    "intent_digest",
    "needs_approval",
)


def intent_differences(state: dict, action: Action) -> list[str]:
    """How `action` and its approving grants differ from the verified checkpoint `state`;
    empty when they are what was signed. A field missing on either side is a difference."""
    signed = state.get("pending_action")
    if signed is None:
        return [f"the signed checkpoint holds no pending intent, the rows hold {action.action_id}"]
    rows = pending_action_state(action)
    differences = []
    if _canonical_fields(rows) != _canonical_fields(signed):  # one comparison when equal
        differences = [
            f"{field} is {_shown(rows.get(field))} in the rows, {_shown(signed.get(field))} signed"
            for field in INTENT_FIELDS
            if canonical_json(rows.get(field)) != canonical_json(signed.get(field))
        ]
    grants = [a for a in action.approvals.all() if a.decision == Approval.Decision.APPROVE]
    rows_approval = approval_state(action, grants)
    signed_approval = state.get("approval")
    if canonical_json(rows_approval) != canonical_json(signed_approval):
        differences.append(
            f"the grants are {_shown(rows_approval)} in the rows, {_shown(signed_approval)} signed"
        )
    return differences


def _canonical_fields(intent: dict) -> bytes:
    """The intent's fields in canonical form; a missing one is not a null one."""
    return canonical_json({field: [intent[field]] for field in INTENT_FIELDS if field in intent})


def _shown(value) -> str:
    text = canonical_json(value).decode()
    return text if len(text) <= 200 else text[:197] + "..."
