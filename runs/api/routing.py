"""The agent API's routers and the rules every view is registered under: reads refuse
query parameters they do not declare; POSTs also run in one transaction under
Idempotency-Key. And the tenant-scoped lookups a view starts from (another tenant's id is a
404)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.http import HttpRequest
from ninja import Router
from ninja.decorators import decorate_view

from control.api_kit.idempotency import idempotent_post
from control.api_kit.parsing import declared_query_only
from runs.exceptions import InvalidArguments, NotFound
from runs.models import Action, Observation, Run
from runs.selectors import action_with_decisions, observation_of_run, run_by_id

router = Router(tags=["runs"])
plans_router = Router(tags=["plans"])


def _operation_id(on: Router, view: Callable) -> str:
    # A contract (client generators name their methods by it; tests/fixtures/interfaces):
    # what it was when the views lived in the modules runs.api and runs.api_plans.
    return f"{'runs_api_plans' if on is plans_router else 'runs_api'}_{view.__name__}"


def get(path: str, **options: Any):
    """router.get refusing query parameters the view does not declare."""

    def register(view):
        decorated = decorate_view(declared_query_only)(view)
        return router.get(path, operation_id=_operation_id(router, view), **options)(decorated)

    return register


def post(path: str, *, on: Router = router, first: Callable | None = None, **options: Any):
    """router.post under the API's POST rules: no query parameters, one transaction, and
    Idempotency-Key. `on`: another router (plans_router). `first`: a step that runs before
    all of that, outside the transaction (runs.api.asking)."""

    def register(view):
        steps = (declared_query_only, idempotent_post, *([first] if first else []))
        decorated = decorate_view(*steps)(view)
        return on.post(path, operation_id=_operation_id(on, view), **options)(decorated)

    return register


def run_or_404(request: HttpRequest, run_id: str) -> Run:
    run = run_by_id(run_id, tenant=request.auth.tenant)
    if run is None:
        raise NotFound(f"no run {run_id} here")
    return run


def action_or_404(request: HttpRequest, action_pk: str) -> Action:
    action = action_with_decisions(action_pk, tenant=request.auth.tenant)
    if action is None:
        raise NotFound(f"no action {action_pk} here")
    return action


def observation_or_422(run: Run, observation_id: UUID | None) -> Observation | None:
    """The run's observation a proposal names, if it names one."""
    if observation_id is None:
        return None
    observation = observation_of_run(observation_id, run=run)
    if observation is None:
        raise InvalidArguments(f"no observation {observation_id} in this run")
    return observation
