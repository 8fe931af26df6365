"""The agent API for plans: `POST /api/v1/runs/{run_id}/plans` (mounted by control.api).

A plan is several intents approved as one; runs.services.plans says what that binds."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Status

from control.api_kit.problems import problems
from control.api_kit.tokens import actor_of
from runs.api import schemas
from runs.api.bodies import plan_body
from runs.api.routing import observation_or_422, plans_router, post, run_or_404
from runs.services import PlanItem, plan_propose


@post(
    "/runs/{run_id}/plans",
    on=plans_router,
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
    observation = observation_or_422(run, payload.observation_id)
    items = [PlanItem(**intent.model_dump()) for intent in payload.intents]
    plan, created = plan_propose(
        run=run, items=items, observation=observation, proposed_by=actor_of(request.auth)
    )
    return Status(201 if created else 200, plan_body(request, plan))
