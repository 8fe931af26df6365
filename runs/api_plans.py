"""The agent API for plans: `POST /api/v1/runs/{run_id}/plans` (mounted by control.api).

A plan is several intents approved as one; runs.services.plans says what that binds."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Status

from control.api_kit.problems import problems
from control.api_kit.tokens import actor_of
from runs import schemas
from runs.api import action_body, post, run_or_404
from runs.exceptions import InvalidArguments
from runs.models import Plan
from runs.selectors import observation_of_run, plan_items
from runs.services import PlanItem, plan_propose

router = Router(tags=["plans"])


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


@post(
    "/runs/{run_id}/plans",
    on=router,
    response={
        200: schemas.PlanOut,
        201: schemas.PlanOut,
        **problems(400, 401, 403, 404, 409, 422),
    },
)
def propose_plan(request: HttpRequest, run_id: str, payload: schemas.PlanIn):
    """Freeze a plan: its intents are approved or rejected as one (the inbox shows it as one
    item) and then executed one at a time, in this order, each under its own key. 201 when
    new; 200 with the same plan for the same intents again; 422 intent_conflict when an
    intent's action_id is already frozen in this run with other arguments."""
    run = run_or_404(request, run_id)
    observation = None
    if payload.observation_id is not None:
        observation = observation_of_run(payload.observation_id, run=run)
        if observation is None:
            raise InvalidArguments(f"no observation {payload.observation_id} in this run")
    items = [PlanItem(**intent.model_dump()) for intent in payload.intents]
    plan, created = plan_propose(
        run=run, items=items, observation=observation, proposed_by=actor_of(request.auth)
    )
    return Status(201 if created else 200, plan_body(request, plan))
