"""The API's response bodies: a run, an action with its decision, receipt and case, a plan
with its intents."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.crypto import salted_hmac

from runs.agent_fields import receipt_body
from runs.models import Action, Plan, Run
from runs.selectors import completed_action_ids, latest_case, plan_items
from runs.tools.registry import redacted_error

CASE_PAGE = "/reconciliation/{case_id}/"


def run_body(run: Run, completed_work: list[str] | None = None) -> dict[str, Any]:
    """The run as the API shows it; `completed_work` when the caller read it for a page."""
    if completed_work is None:
        completed_work = completed_action_ids([run])[run.pk]
    return {
        "id": run.id,
        "goal": run.goal,
        "phase": run.phase,
        "state_version": run.state_version,
        "last_event_seq": run.last_event_seq,
        "plan": run.plan,
        "completed_work": completed_work,
        "completed": {"count": run.completed_count, "digest": run.completed_digest},
        "pending_work": run.pending_work,
        "budget": {"limit": run.budget_limit, "used": run.budget_used},
        "deadline": run.deadline,
        "versions": run.versions,
        "next_eligible_at": run.next_eligible_at,
        "retry_count": run.retry_count,
        "stop_reason": run.stop_reason,
        "evidence": run.evidence,
        "created_by": run.created_by,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
    }


def approver_ref(*, tenant_id, user_id) -> str:
    """Who decided, as an agent may see it: stable per person within a tenant (so an agent
    can tell two approvals by one operator from two operators), never the username, and not
    linkable across tenants. Keyed by DJANGO_SECRET_KEY: rotating it renames every approver."""
    digest = salted_hmac(
        "countersign.api.approver", f"{tenant_id}:{user_id}", algorithm="sha256"
    ).hexdigest()
    return f"approver-{digest[:16]}"


def _decision(action: Action) -> dict[str, Any] | None:
    if not action.needs_approval:
        return {"outcome": "not_required", "reason": "", "decided_at": None, "approvals": []}
    approvals = sorted(action.approvals.all(), key=lambda approval: approval.created_at)
    shown = [
        {
            "decision": approval.decision,
            "approver": approver_ref(tenant_id=action.tenant_id, user_id=approval.approver_id),
            "reason": approval.reason,
            "created_at": approval.created_at,
            "rule": approval.rule.name if approval.rule_id else None,
        }
        for approval in approvals
    ]
    rejections = [approval for approval in approvals if approval.decision == "reject"]
    if rejections:
        return {
            "outcome": "reject",
            "reason": action.decision_reason or rejections[0].reason,
            "decided_at": rejections[0].created_at,
            "approvals": shown,
        }
    if approvals and action.status != Action.Status.WAITING_APPROVAL:
        return {
            "outcome": "approve",
            "reason": approvals[-1].reason,
            "decided_at": approvals[-1].created_at,
            "approvals": shown,
        }
    return None


def _reference(action: Action | None) -> dict[str, Any] | None:
    return {"id": action.id, "action_id": action.action_id} if action else None


def action_body(request: HttpRequest, action: Action) -> dict[str, Any]:
    case = latest_case(action)
    return {
        "id": action.id,
        "run_id": action.run_id,
        "action_id": action.action_id,
        "tool": action.tool,
        "target": action.target,
        "args": action.args,
        "contract_version": action.contract_version,
        "idempotency_key": action.idempotency_key,
        "intent_digest": action.intent_digest,
        "observation_id": action.observation_id,
        "status": action.status,
        "needs_approval": action.needs_approval,
        "required_approvals": action.required_approvals,
        "expires_at": action.expires_at,
        "attempt_count": action.attempt_count,
        "next_attempt_at": action.next_attempt_at,
        "error_class": action.error_class or None,
        # Stored scrubbed already; again here for rows stored before, or a changed connector.
        "last_error": redacted_error(action.last_error, tool=action.tool) or None,
        "decision": _decision(action),
        "receipt": receipt_body(action),
        "reconciliation_case": {
            **case,
            "url": request.build_absolute_uri(CASE_PAGE.format(case_id=case["id"])),
        }
        if case
        else None,
        "supersedes": _reference(action.supersedes),
        "superseded_by": _reference(getattr(action, "superseded_by", None)),
        "created_at": action.created_at,
        "updated_at": action.updated_at,
    }


def plan_body(request: HttpRequest, plan: Plan) -> dict:
    return {
        "id": plan.id,
        "run_id": plan.run_id,
        "digest": plan.digest,
        "status": plan.status,
        "size": plan.size,
        "required_approvals": plan.required_approvals,
        "expires_at": plan.expires_at,
        "decision_reason": plan.decision_reason,
        "intents": [action_body(request, item) for item in plan_items(plan)],
    }
