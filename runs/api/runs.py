"""The agent's JSON API for runs, observations and actions (mounted by control.api).

Every endpoint reads through the token's tenant (another tenant's objects are 404) and
changes state only through runs.services. POSTs run under control.api_kit.idempotency.
"""

from __future__ import annotations

import json
from typing import Annotated

from django.http import HttpRequest
from ninja import Field, Path, Query, Status

from control.api_kit.limits import long_poll_slot
from control.api_kit.problems import problems
from control.api_kit.tokens import actor_of
from runs.api import schemas
from runs.api.asking import writes_asked_by_key_first
from runs.api.bodies import action_body, approver_ref, run_body
from runs.api.routing import action_or_404, get, observation_or_422, post, run_or_404
from runs.exceptions import CheckpointError, InvalidArguments, NotFound
from runs.limits import agent_data_check
from runs.models import Action, Run
from runs.record.checkpoints import checkpoint_verify, latest_checkpoint
from runs.selectors import (
    action_frozen_under,
    completed_action_ids,
    runs_newest_first,
    tool_catalog,
)
from runs.services import action_propose, observation_record, run_cancel, run_complete, run_start
from runs.waiting import WAITED_ON_STATUSES, status_after_waiting


@post("/runs", response={201: schemas.RunOut, **problems(400, 401, 409, 422)})
def create_run(request: HttpRequest, payload: schemas.RunIn):
    """Start a run. `budget` limits its tool calls; `deadline` stops it when it passes.
    The goal, plan and versions have size limits (422 invalid_arguments naming the field)."""
    run = run_start(
        tenant=request.auth.tenant,
        goal=payload.goal,
        created_by=actor_of(request.auth),
        plan=payload.plan,
        budget_limit=payload.budget,
        deadline=payload.deadline,
        versions=payload.versions,
    )
    run.refresh_from_db()
    return Status(201, run_body(run))


@get("/runs", response={200: schemas.RunPage, **problems(401, 422)})
def list_runs(
    request: HttpRequest,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
    offset: Annotated[int, Field(ge=0, le=1_000_000_000)] = 0,
    phase: Run.Phase | None = None,
):
    """The tenant's runs, newest first, `limit` (at most 100) from `offset`."""
    runs = runs_newest_first(tenant=request.auth.tenant, phase=phase)
    count = runs.count()
    page = list(runs[offset : offset + limit])
    completed = completed_action_ids(page)
    following = None
    if offset + limit < count:
        query = request.GET.copy()
        query["offset"] = str(offset + limit)
        query["limit"] = str(limit)
        following = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
    return {
        "items": [run_body(run, completed[run.pk]) for run in page],
        "count": count,
        "limit": limit,
        "offset": offset,
        "next": following,
    }


@get("/runs/{run_id}", response={200: schemas.RunOut, **problems(401, 404, 422)})
def get_run(request: HttpRequest, run_id: str):
    return run_body(run_or_404(request, run_id))


@get("/tools", response={200: list[schemas.ToolOut], **problems(401, 422)})
def list_tools(request: HttpRequest):
    """Every tool and contract version; needs_approval as this tenant's policy says."""
    return tool_catalog(tenant=request.auth.tenant)


@post(
    "/runs/{run_id}/observations",
    response={201: schemas.ObservationOut, **problems(400, 401, 404, 409, 422)},
)
def record_observation(request: HttpRequest, run_id: str, payload: schemas.ObservationIn):
    """Record what the agent saw; an action that needs approval must rest on one."""
    agent_data_check(summary=payload.summary)
    observation = observation_record(
        run=run_or_404(request, run_id),
        source=payload.source,
        ref=payload.ref,
        content_hash=payload.content_hash,
        summary=payload.summary,
        actor=actor_of(request.auth),
    )
    return Status(
        201,
        {
            "id": observation.id,
            "run_id": observation.run_id,
            "source": observation.source,
            "ref": observation.ref,
            "content_hash": observation.content_hash,
            "summary": observation.summary,
            "created_at": observation.created_at,
        },
    )


@post(
    "/runs/{run_id}/actions",
    response={
        200: schemas.ActionOut,
        201: schemas.ActionOut,
        **problems(400, 401, 403, 404, 409, 422),
    },
)
def propose_action(request: HttpRequest, run_id: str, payload: schemas.ActionIn):
    """Freeze an intent: 201 when new; 200 with the same intent when this logical action
    was already proposed with the same digest; 422 intent_conflict when with another."""
    run = run_or_404(request, run_id)
    observation = observation_or_422(run, payload.observation_id)
    action, created = _propose(request, run, payload, observation)
    action = action_or_404(request, str(action.pk))
    return Status(201 if created else 200, action_body(request, action))


def _propose(request, run: Run, payload: schemas.ActionIn, observation) -> tuple[Action, bool]:
    try:
        return action_propose(
            run=run,
            action_id=payload.action_id,
            tool=payload.tool,
            target=payload.target,
            args=payload.args,
            contract_version=payload.contract_version,
            observation=observation,
            proposed_by=actor_of(request.auth),
        )
    except ValueError as error:
        # The key's parts refuse control and invisible characters the tool schema allows.
        raise InvalidArguments(str(error)) from None


@get("/runs/{run_id}/actions", response={200: schemas.ActionMatches, **problems(401, 404, 422)})
def find_actions(
    request: HttpRequest,
    run_id: str,
    action_id: Annotated[str, Query(min_length=1, max_length=200)],
):
    """The intent this run froze under the logical `action_id`: none or one item. An agent
    that restarted asks before proposing again, so it records no second observation."""
    run = run_or_404(request, run_id)
    found = action_frozen_under(run, action_id=action_id)
    if found is None:
        return {"items": []}
    return {"items": [action_body(request, action_or_404(request, str(found.pk)))]}


@get("/actions/{id}", response={200: schemas.ActionOut, **problems(401, 404, 422)})
def get_action(
    request: HttpRequest,
    action_pk: Annotated[str, Path(alias="id", description="The action's `id` (a UUID).")],
    wait: Annotated[
        float,
        Query(ge=0, allow_inf_nan=False, description="Seconds to long-poll; above 30 is 30."),
    ] = 0,
):
    """The action's status, decision (with the reject reason), receipt, error class and
    reconciliation case. With `wait`, long-polls up to that many seconds (at most 30; more
    is clamped) while the action is still waiting for approval or executing, or uncertain
    while its reconciliation case is being resolved; a token has
    at most COUNTERSIGN_API_MAX_LONG_POLLS waiting at once (429 beyond)."""
    action = action_or_404(request, action_pk)
    wait = min(wait, schemas.MAX_WAIT_SECONDS)
    if action.status in WAITED_ON_STATUSES and wait > 0:
        with long_poll_slot(request.auth, wait):
            status = status_after_waiting(action, wait)
        if status != action.status:
            action = action_or_404(request, action_pk)
    return action_body(request, action)


@post(
    "/runs/{run_id}/complete", response={200: schemas.RunOut, **problems(400, 401, 404, 409, 422)}
)
def complete_run(request: HttpRequest, run_id: str, payload: schemas.CompleteIn):
    """Complete the run with evidence: the actions whose receipts (or reads) met the goal."""
    run = run_or_404(request, run_id)
    run_complete(run=run, action_ids=payload.evidence.action_ids, actor=actor_of(request.auth))
    run.refresh_from_db()
    return run_body(run)


@post(
    "/runs/{run_id}/cancel",
    first=writes_asked_by_key_first,
    response={200: schemas.CancelOut, **problems(400, 401, 404, 409, 422)},
)
def cancel_run(request: HttpRequest, run_id: str, payload: schemas.CancelIn):
    """Cancel the run: not-started actions are cancelled, in-doubt ones stay for
    reconciliation. Answers the report of effects done, in doubt and not started."""
    # A write whose earlier attempt may have committed was asked for by its key first
    # (writes_asked_by_key_first): it is done, with its receipt, or in doubt; never not started.
    run = run_or_404(request, run_id)
    report = run_cancel(run=run, reason=payload.reason, actor=actor_of(request.auth))
    run.refresh_from_db()
    return {"run": run_body(run), "report": report}


@get(
    "/runs/{run_id}/checkpoint",
    response={200: schemas.CheckpointOut, **problems(401, 404, 422, 500)},
)
def get_checkpoint(request: HttpRequest, run_id: str):
    """The run's latest checkpoint, served only after it verified here, with its approvers
    as the opaque ids the rest of the API shows: the stored one names them by user id, so
    what an agent reads is not what was signed, and the answer says so (`mac_scope`)."""
    run = run_or_404(request, run_id)
    checkpoint = latest_checkpoint(run)
    if checkpoint is None:
        raise NotFound(f"run {run_id} has no checkpoint")
    state = checkpoint_verify(checkpoint.body)
    if state["run_id"] != str(run.pk) or state["tenant_id"] != str(run.tenant_id):
        raise CheckpointError("freshness", "the stored checkpoint belongs to another run")
    envelope = json.loads(checkpoint.body)
    approval = envelope["state"].get("approval") or {}
    if "approvers" in approval:
        approval["approvers"] = sorted(
            approver_ref(tenant_id=run.tenant_id, user_id=user) for user in approval["approvers"]
        )
    return {**envelope, "mac_scope": "server_only"}
