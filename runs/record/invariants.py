"""The business invariants a checkpoint's state must meet beyond its MAC (DESIGN.md,
Checkpoints): checked after the MAC and the upgraders, before anything is advanced. Each
failure is a CheckpointError at "invariants" naming the rule."""

from __future__ import annotations

import re

from control.foundation.canonical import idempotency_key, intent_digest
from runs.exceptions import CheckpointError
from runs.models import Run
from runs.record.completed import COMPLETED_GENESIS

# Agent data a state may sign by digest instead of inline (runs.record.checkpoints).
DETACHABLE = frozenset({"plan", "versions"})
PHASES_WITH_PENDING_ACTION = {
    "waiting_approval": {"waiting_approval"},
    "executing": {"approved", "in_flight", "retry_wait", "needs_attention"},
    "waiting_reconciliation": {"uncertain"},
}
STATE_FIELDS: dict[str, type | tuple[type, ...]] = {
    "run_id": str,
    "tenant_id": str,
    "goal": str,
    "phase": str,
    "state_version": int,
    "last_event_seq": int,
    "event_head_hash": str,
    "plan": dict,
    "pending_work": list,
    "pending_action": (dict, type(None)),
    "approval": (dict, type(None)),
    "open_plan": (dict, type(None)),
    "completed": dict,
    "in_doubt_actions": list,
    "budget": dict,
    "deadline": (str, type(None)),
    "versions": dict,
    "detached": dict,
    "next_eligible_at": (str, type(None)),
    "retry_count": int,
    "stop_reason": str,
    "evidence": (dict, type(None)),
}
KNOWN_PHASES = frozenset(Run.Phase.values)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def check_invariants(state: dict) -> None:
    """Business rules a state must meet beyond its types; raises CheckpointError."""

    def fail(message: str):
        raise CheckpointError("invariants", message)

    for field, kind in STATE_FIELDS.items():
        if field not in state:
            fail(f"missing field {field!r}")
        value = state[field]
        if (isinstance(value, bool) and kind is int) or not isinstance(value, kind):
            fail(f"field {field!r} has the wrong type")
    if extra := set(state) - set(STATE_FIELDS):
        fail(f"unknown fields {sorted(extra)}")
    phase = state["phase"]
    if phase not in KNOWN_PHASES:
        fail(f"unknown phase {phase!r}")
    if state["state_version"] < 1 or state["last_event_seq"] != state["state_version"]:
        fail("state version and event sequence must be equal and positive")
    pending = state["pending_action"]
    allowed = PHASES_WITH_PENDING_ACTION.get(phase)
    if allowed is None and pending is not None:
        fail(f"phase {phase!r} must not hold an executable pending action")
    if allowed is not None:
        if pending is None:
            fail(f"phase {phase!r} requires a frozen pending action")
        _check_pending_action(pending, allowed, fail)
        if phase == "waiting_approval" and not pending.get("observation"):
            fail("waiting_approval requires the observation that justified the action")
        if phase == "executing":
            _check_approval(pending, state["approval"], fail)
    _check_open_plan(state["open_plan"], pending, fail)
    _check_detached(state, fail)
    _check_completed(state["completed"], fail)
    if phase == "completed":
        _check_evidence(state, fail)
    budget = state["budget"]
    limit, used = budget.get("limit"), budget.get("used")
    if not isinstance(used, int) or used < 0 or (limit is not None and not isinstance(limit, int)):
        fail("budget must hold an integer limit (or null) and used")
    if limit is not None and used > limit and phase != "budget_exhausted":
        fail("budget overspent but the run is not budget_exhausted")


def _check_pending_action(pending: dict, allowed: set[str], fail) -> None:
    required = (
        "action_id",
        "tool",
        "target",
        "args",
        "contract_version",
        "idempotency_key",
        "intent_digest",
        "status",
        "run_id",
    )
    if any(field not in pending for field in required):
        fail("the pending action is missing frozen fields")
    if pending["status"] not in allowed:
        fail(f"pending action status {pending['status']!r} does not fit the phase")
    try:
        digest = intent_digest(tool=pending["tool"], target=pending["target"], args=pending["args"])
        key = idempotency_key(
            run_id=pending["run_id"],
            action_id=pending["action_id"],
            target=pending["target"],
            contract_version=pending["contract_version"],
        )
    except (TypeError, ValueError) as error:
        fail(f"the pending action cannot be fingerprinted: {error}")
    if digest != pending["intent_digest"]:
        fail("the pending action's digest does not match its tool, target and args")
    if key != pending["idempotency_key"]:
        fail("the pending action's idempotency key does not match its identity")


def _check_approval(pending: dict, approval: dict | None, fail) -> None:
    if not pending.get("needs_approval", True):
        return
    if not approval or approval.get("decision") != "approve":
        fail("an executing action that needs approval has no approval")
    if approval.get("intent_digest") != pending["intent_digest"]:
        fail("the approval is bound to another digest")
    for field in ("state_version", "target_scope", "expires_at"):
        if approval.get(field) is None:
            fail(f"the approval has no {field}")
    if approval["target_scope"] != pending["target"]:
        fail("the approval's scope does not cover the target")


OPEN_PLAN_FIELDS = {
    "id": str,
    "digest": str,
    "from_position": int,
    "items": int,
    "items_hash": str,
    "grant": (dict, type(None)),
}


def _check_open_plan(open_plan: dict | None, pending: dict | None, fail) -> None:
    """A plan's signed link (runs.record.carry) sits beside the plan's next item only."""
    if open_plan is None:
        return
    if pending is None:
        fail("open_plan requires its next item as the pending action")
    if set(open_plan) != set(OPEN_PLAN_FIELDS) or any(
        isinstance(open_plan[field], bool) or not isinstance(open_plan[field], kind)
        for field, kind in OPEN_PLAN_FIELDS.items()
    ):
        fail(f"open_plan must hold exactly {sorted(OPEN_PLAN_FIELDS)} with their types")
    if not DIGEST.fullmatch(open_plan["items_hash"]) or open_plan["items"] < 1:
        fail("open_plan must sign the link of at least one item")


def _check_detached(state: dict, fail) -> None:
    detached = state["detached"]
    if not set(detached) <= DETACHABLE:
        fail(f"only {sorted(DETACHABLE)} may be detached")
    for field, reference in detached.items():
        if (
            not isinstance(reference, dict)
            or set(reference) != {"digest", "bytes"}
            or not isinstance(reference["digest"], str)
            or not DIGEST.fullmatch(reference["digest"])
            or not isinstance(reference["bytes"], int)
            or isinstance(reference["bytes"], bool)
            or state[field] != {}
        ):
            fail(f"detached {field} must be a digest and size, with the field itself empty")


def _check_completed(completed: dict, fail) -> None:
    count, digest = completed.get("count"), completed.get("digest")
    if set(completed) != {"count", "digest"}:
        fail("completed must hold exactly count and digest")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        fail("completed count must be a non-negative integer")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        fail("completed digest must be sha256:<64 hex>")
    if count == 0 and digest != COMPLETED_GENESIS:
        fail("no completed work must have the empty digest")


def _check_evidence(state: dict, fail) -> None:
    evidence = state["evidence"]
    if (
        not evidence
        or not isinstance(evidence.get("action_ids"), list)
        or not evidence["action_ids"]
    ):
        fail("completed requires evidence naming the actions that met the goal")
    proven = evidence.get("receipts")
    if not isinstance(proven, dict):
        fail("completed requires the receipts of the actions that met the goal")
    if missing := [a for a in evidence["action_ids"] if not isinstance(proven.get(a), str)]:
        fail(f"completed names actions without a receipt or read: {missing}")
