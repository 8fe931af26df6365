"""The decision view: the canonical content of what an approver is shown before deciding
(a card, a plan, a decision link's page) and its digest. The pages put the digest in their
forms; the decision services check it against the view as it is when the decision lands and
sign the view into the decision receipt (runs.record.evidence), so an auditor sees exactly
what the approver saw."""

from __future__ import annotations

import hashlib
from datetime import datetime

from control.foundation.canonical import canonical_json
from runs.models import Action, Plan, Risk
from runs.selectors.plans import intent_summary


def decision_view(request: Action | Plan, items: list[Action] | None = None) -> dict:
    """An intent's view, or a plan's with each of its `items` (in their order)."""
    if isinstance(request, Plan):
        assert items is not None, "a plan's view lists its items"
        return {
            "plan_digest": request.digest,
            "items": [_item_view(item) for item in items],
            **_binding(request),
        }
    return {**_item_view(request), **_binding(request)}


def view_digest(view: dict) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(view)).hexdigest()


def _item_view(action: Action) -> dict:
    return {
        "intent_digest": action.intent_digest,
        "summary": intent_summary(action),
        "tool": action.tool,
        "contract_version": action.contract_version,
        "target": action.target,
        "args": action.args,
        "risk": Risk(action.risk).label,
    }


def _binding(request: Action | Plan) -> dict:
    return {
        "state_version": request.base_version,
        "expires_at": _moment(request.expires_at),
        "required_approvals": request.required_approvals,
        "four_eyes": request.four_eyes,
    }


def _moment(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
