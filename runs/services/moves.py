"""Moving a run between installations: fence it here (`run_move_out`), restore it there
(`run_restore`) from its verified export (runs.record.export).

A pending intent, or a plan's remaining items, come back waiting for a fresh approval (grants
do not travel); a write in doubt refuses the move, fail closed.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from control.models import Tenant
from runs.exceptions import InvalidArguments, InvalidTransition
from runs.models import TERMINAL_PHASES, Action, Lease, Observation, Run, notify_kinds
from runs.record.authored import authored
from runs.record.checkpoints import latest_verified
from runs.record.events import append_event
from runs.record.export import export_text
from runs.selectors import policy_for
from runs.services.common import notify_approvers
from runs.services.plans import PlanItem, plan_propose
from runs.services.runs import checkpoint_or_stop, run_stop

Phase = Run.Phase
Status = Action.Status
MOVED_REASON = "moved: exported for import in another installation"


@transaction.atomic
def run_move_out(*, run: Run, actor: str) -> str:
    """Fences the source of a move: returns the run's export (its latest verified checkpoint,
    with a plan's remaining items) and stops the run here (cancelled, "moved"), in one
    transaction, so an approved intent can never be executed in two places. A write in doubt
    refuses: reconcile it here first."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.phase in TERMINAL_PHASES:
        raise InvalidTransition(f"run is already {run.phase}: there is nothing to move")
    in_doubt = run.actions.filter(status__in=[Status.IN_FLIGHT, Status.UNCERTAIN])
    if doubtful := list(in_doubt.values_list("action_id", flat=True)):
        raise InvalidTransition(
            f"actions {doubtful} may have been applied: reconcile them here before moving the run"
        )
    checkpoint, _ = latest_verified(run)
    text = export_text(run, checkpoint)
    run_stop(run, phase=Phase.CANCELLED, reason=MOVED_REASON, actor=actor)
    audit_record(
        actor=actor,
        verb="run.move_out",
        tenant=run.tenant,
        object_type="run",
        object_id=str(run.pk),
        reason=MOVED_REASON,
        data={"state_version": checkpoint.state_version},
    )
    return text


@transaction.atomic
def run_restore(*, state: dict, actor: str, plan_items: list[dict] | None = None) -> Run:
    """Recreates a run from a verified checkpoint state exported elsewhere (and, for an open
    plan, its remaining items, verified against the state's signed chain), keeping its id so
    its idempotency keys stay the same."""
    tenant = Tenant.objects.filter(pk=state["tenant_id"]).first()
    if tenant is None:
        raise InvalidArguments(f"tenant {state['tenant_id']} does not exist here; create it first")
    if Run.objects.filter(pk=state["run_id"]).exists():
        raise InvalidTransition(f"run {state['run_id']} already exists here")
    if state["phase"] in TERMINAL_PHASES:
        raise InvalidTransition(f"run is {state['phase']}: there is nothing to continue")
    pending = state["pending_action"]
    if pending is not None and pending["status"] not in (Status.WAITING_APPROVAL, Status.APPROVED):
        raise InvalidTransition(
            f"action {pending['action_id']} is {pending['status']}: its effect is in doubt; "
            "reconcile it where the run lives before moving the run"
        )
    if pending is not None and not pending.get("observation"):
        raise InvalidArguments("the pending action has no observation to show an approver here")
    # The source's completed work stays there with its receipts; the chain goes on from it.
    run = Run.objects.create(
        id=state["run_id"],
        tenant=tenant,
        goal=state["goal"],
        created_by=actor,
        completed_count=state["completed"]["count"],
        completed_digest=state["completed"]["digest"],
    )
    Lease.objects.create(run=run)
    single = pending is not None and not plan_items
    append_event(
        run,
        type="run.imported",
        actor=actor,
        payload={
            "source_state_version": state["state_version"],
            "source_event_head": state["event_head_hash"],
            "completed": state["completed"],
        },
        changes={
            "goal": state["goal"],
            # A plan is proposed again below, from running, as the agent proposed it there.
            "phase": Phase.WAITING_APPROVAL if single else Phase.RUNNING,
            "plan": state["plan"],
            "pending_work": state["pending_work"],
            "budget_limit": state["budget"]["limit"],
            "budget_used": state["budget"]["used"],
            "deadline": state["deadline"],
            "versions": state["versions"],
            "next_eligible_at": state["next_eligible_at"],
            "retry_count": state["retry_count"],
            "stop_reason": state["stop_reason"],
            "evidence": None,
        },
    )
    if plan_items:
        _restore_plan(run, pending, plan_items)
    elif pending is not None:
        restored = _restore_pending_action(run, pending)
        notify_approvers(run, restored, kind=notify_kinds.REQUESTED)
    checkpoint_or_stop(run)
    audit_record(
        actor=actor,
        verb="run.import",
        tenant=tenant,
        object_type="run",
        object_id=str(run.pk),
        data={
            "source_state_version": state["state_version"],
            "plan_items": len(plan_items or []),
        },
    )
    return run


def _restore_observation(run: Run, seen: dict | None) -> Observation | None:
    if not seen:
        return None
    return Observation.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        source=seen["source"],
        ref=seen["ref"],
        content_hash=seen["content_hash"],
        summary=seen["summary"],
    )


def _restore_plan(run: Run, pending: dict, items: list[dict]) -> None:
    """The remaining items as a plan proposed again here: the same logical ids, keys and
    digests (a server whose tools normalize them otherwise refuses the import)."""
    plan, _ = plan_propose(
        run=run,
        items=[
            PlanItem(
                action_id=item["action_id"],
                tool=item["tool"],
                target=item["target"],
                args=item["args"],
                contract_version=item["contract_version"],
            )
            for item in items
        ],
        observation=_restore_observation(run, pending.get("observation")),
        proposed_by=f"import of plan {pending['action_id']}...",
    )
    restored = {a.action_id: (a.idempotency_key, a.intent_digest) for a in plan.items.all()}
    for item in items:
        if restored.get(item["action_id"]) != (item["idempotency_key"], item["intent_digest"]):
            raise InvalidArguments(
                f"{item['action_id']} freezes here under another key or digest: this server's "
                f"{item['tool']} {item['contract_version']} is not the one it was proposed with"
            )


def _restore_pending_action(run: Run, pending: dict) -> Action:
    observation = _restore_observation(run, pending.get("observation"))
    policy = policy_for(tenant=run.tenant, tool=pending["tool"])
    action = Action.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        action_id=pending["action_id"],
        tool=pending["tool"],
        target=pending["target"],
        args=pending["args"],
        contract_version=pending["contract_version"],
        idempotency_key=pending["idempotency_key"],
        intent_digest=pending["intent_digest"],
        observation=observation,
        proposed_by=f"import of {pending['action_id']}",
        needs_approval=True,
        four_eyes=policy.four_eyes,
        required_approvals=policy.required_approvals,
        risk=policy.risk,
        status=Status.WAITING_APPROVAL,
        base_version=run.state_version,
        base_event_seq=run.last_event_seq,
        expires_at=db_now() + timedelta(seconds=policy.approval_seconds),
    )
    authored([action.pk])
    return action
