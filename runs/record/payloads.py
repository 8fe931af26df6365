"""What each event of a run records: its type, its payload and the changes it makes to the run.

The services append these events one at a time; bench.builder computes the same events in
bulk without going through the services. Both call the functions here, so what the bench seeds
cannot drift from what the services write. Each function returns keyword arguments for
`append_event` (and the builder's in-memory equivalent), and only reads what it is given: the
caller decides when and by whom the event is appended.
"""

from __future__ import annotations

from datetime import datetime
from typing import NotRequired, TypedDict

from runs.models import Action, Observation, Run

Phase = Run.Phase


class Recorded(TypedDict):
    """Keyword arguments for `append_event`: the event's type and what it records."""

    type: str
    payload: NotRequired[dict]
    changes: NotRequired[dict]


def run_started(
    *,
    goal: str,
    plan: dict | None,
    budget_limit: int | None,
    deadline: datetime | None,
    versions: dict | None,
) -> Recorded:
    # No defaults here: run_start's stay the only ones, and the bench says what it seeds.
    # Every replayed field is set: replay folds changes from an empty state.
    return {
        "type": "run.started",
        "changes": {
            "goal": goal,
            "phase": Phase.RUNNING,
            "plan": plan or {},
            "pending_work": [],
            "budget_limit": budget_limit,
            "budget_used": 0,
            "deadline": deadline,
            "versions": versions or {},
            "next_eligible_at": None,
            "retry_count": 0,
            "stop_reason": "",
            "evidence": None,
        },
    }


def observation_recorded(*, observation: Observation) -> Recorded:
    return {
        "type": "observation.recorded",
        "payload": {
            "observation": str(observation.id),
            "source": observation.source,
            "ref": observation.ref,
            "content_hash": observation.content_hash,
        },
    }


def action_proposed(*, run: Run, action: Action, unverified_policy: str = "") -> Recorded:
    """`run` as it stands before the event: its pending work gains the new intent.
    `unverified_policy`: why the tool's policy row did not verify, when it did not (the
    intent then waits under the strictest policy, and verify_run names it)."""
    supersedes = action.supersedes
    payload = {
        "action_id": action.action_id,
        "tool": action.tool,
        "target": action.target,
        "intent_digest": action.intent_digest,
        "idempotency_key": action.idempotency_key,
        "supersedes": supersedes.action_id if supersedes is not None else None,
    }
    if unverified_policy:
        payload["unverified_policy"] = unverified_policy
    return {
        "type": "action.proposed",
        "payload": payload,
        "changes": {
            # An intent that needs no approval goes straight to a worker.
            "phase": Phase.WAITING_APPROVAL if action.needs_approval else Phase.EXECUTING,
            "pending_work": [
                action.action_id,
                *(item for item in run.pending_work if item != action.action_id),
            ],
        },
    }


def action_approved(*, approvals: int, rule: dict | None = None) -> Recorded:
    """`approvals`: the grants that together reached the required number, this one included;
    `rule` ({id, name}) when a standing rule made them."""
    payload: dict = {"approvals": approvals}
    if rule is not None:
        payload["rule"] = rule
    return {"type": "action.approved", "payload": payload, "changes": {"phase": Phase.EXECUTING}}
