"""A run's life: start, observations, limits, stop, cancel, complete, and restore from an import."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from control.audit import audit_record
from control.clock import db_now
from control.models import Tenant
from runs import notifications
from runs.exceptions import InvalidArguments, InvalidTransition, MissingEvidence
from runs.limits import agent_data_check
from runs.models import (
    TERMINAL_PHASES,
    Action,
    Lease,
    Observation,
    Run,
)
from runs.record.checkpoints import (
    REFUSED_REASON_PREFIX,
    checkpoint_write,
    latest_verified,
)
from runs.record.events import append_event
from runs.record.payloads import observation_recorded, run_started
from runs.record.verification import events_verify
from runs.selectors import policy_for, run_effects_report
from runs.services.common import action_set_status, notify_approvers, require_phase

Phase = Run.Phase
MOVED_REASON = "moved: exported for import in another installation"
Status = Action.Status


@transaction.atomic
def run_start(
    *,
    tenant: Tenant,
    goal: str,
    created_by: str,
    plan: dict | None = None,
    budget_limit: int | None = None,
    deadline: datetime | None = None,
    versions: dict | None = None,
) -> Run:
    if not goal.strip():
        raise InvalidArguments("goal must not be empty")
    agent_data_check(goal=goal, plan=plan, versions=versions)
    if budget_limit is not None and budget_limit < 1:
        raise InvalidArguments("budget limit must be a positive number of tool calls")
    if deadline is not None and deadline <= db_now():
        raise InvalidArguments("deadline is already past")
    run = Run.objects.create(tenant=tenant, goal=goal, created_by=created_by)
    Lease.objects.create(run=run)
    append_event(
        run,
        actor=created_by,
        **run_started(
            goal=goal, plan=plan, budget_limit=budget_limit, deadline=deadline, versions=versions
        ),
    )
    checkpoint_write(run)
    return run


@transaction.atomic
def observation_record(
    *, run: Run, source: str, ref: str, content_hash: str, summary: str, actor: str
) -> Observation:
    require_phase(run, {Phase.RUNNING}, "record an observation")
    if not content_hash.startswith("sha256:") or len(content_hash) != 71:
        raise InvalidArguments("content_hash must be 'sha256:' followed by 64 hex digits")
    observation = Observation.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        source=source,
        ref=ref,
        content_hash=content_hash,
        summary=summary,
    )
    append_event(run, actor=actor, **observation_recorded(observation=observation))
    checkpoint_write(run)
    return observation


def run_enforce_limits(*, run: Run) -> bool:
    """Stops a run past its deadline or out of budget; True when it stopped it."""
    if run.phase in TERMINAL_PHASES:
        return False
    if run.deadline is not None and db_now() >= run.deadline:
        run_stop(run, phase=Phase.DEADLINE_EXCEEDED, reason="deadline passed", actor="countersign")
        return True
    if run.budget_limit is not None and run.budget_used >= run.budget_limit:
        run_stop(run, phase=Phase.BUDGET_EXHAUSTED, reason="budget spent", actor="countersign")
        return True
    return False


@transaction.atomic
def run_stop(run: Run, *, phase: str, reason: str, actor: str) -> dict:
    """Ends the run in `phase`: not-started actions are cancelled, in-doubt ones stay for
    reconciliation. Returns the report of effects done, in doubt and not started."""
    report = run_effects_report(run)
    not_started = run.actions.filter(
        status__in=[
            Status.WAITING_APPROVAL,
            Status.APPROVED,
            Status.RETRY_WAIT,
            Status.NEEDS_ATTENTION,
        ]
    )
    for action in not_started:
        action_set_status(action, expected={action.status}, status=Status.CANCELLED)
    append_event(
        run,
        type=f"run.{phase}",
        actor=actor,
        payload={"report": report},
        changes={"phase": phase, "stop_reason": reason, "pending_work": []},
    )
    checkpoint_write(run)
    return report


@transaction.atomic
def run_cancel(*, run: Run, reason: str, actor: str) -> dict:
    if run.phase in TERMINAL_PHASES:
        raise InvalidTransition(f"cannot cancel: run is already {run.phase}")
    report = run_stop(run, phase=Phase.CANCELLED, reason=reason or "cancelled", actor=actor)
    audit_record(
        actor=actor,
        verb="run.cancel",
        tenant=run.tenant,
        object_type="run",
        object_id=str(run.pk),
        reason=reason,
        data=report,
    )
    return report


@transaction.atomic
def run_complete(*, run: Run, action_ids: list[str], actor: str) -> Run:
    """Completes the run only with evidence: the named actions must each hold a receipt
    (a write's, or the current read that showed the goal already satisfied)."""
    require_phase(run, {Phase.RUNNING}, "complete")
    if not action_ids:
        raise MissingEvidence("completion needs evidence: name the actions that met the goal")
    proven = {
        action.action_id: action
        for action in run.actions.filter(
            action_id__in=action_ids, status__in=[Status.SUCCEEDED, Status.SATISFIED]
        ).select_related("receipt")
    }
    missing = [action_id for action_id in action_ids if action_id not in proven]
    if missing:
        raise MissingEvidence(f"no receipt or read proves actions {missing}")
    evidence = {
        "action_ids": list(action_ids),
        "receipts": {a.action_id: a.receipt.receipt_id for a in proven.values()},
    }
    append_event(
        run,
        type="run.completed",
        actor=actor,
        changes={"phase": Phase.COMPLETED, "evidence": evidence, "pending_work": []},
    )
    checkpoint_write(run)
    return run


@transaction.atomic
def run_restore(*, state: dict, actor: str) -> Run:
    """Recreates a run from a verified checkpoint state exported elsewhere, keeping its id
    so its idempotency keys stay the same. A pending intent comes back waiting for a fresh
    approval here (grants do not travel); a write in doubt is refused, fail closed."""
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
            "phase": Phase.WAITING_APPROVAL if pending else Phase.RUNNING,
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
    if pending is not None:
        restored = _restore_pending_action(run, pending)
        notify_approvers(run, restored, kind=notifications.REQUESTED)
    checkpoint_write(run)
    audit_record(
        actor=actor,
        verb="run.import",
        tenant=tenant,
        object_type="run",
        object_id=str(run.pk),
        data={"source_state_version": state["state_version"]},
    )
    return run


def _restore_pending_action(run: Run, pending: dict) -> Action:
    seen = pending.get("observation")
    observation = None
    if seen:
        observation = Observation.objects.create(
            tenant_id=run.tenant_id,
            run=run,
            source=seen["source"],
            ref=seen["ref"],
            content_hash=seen["content_hash"],
            summary=seen["summary"],
        )
    policy = policy_for(tenant=run.tenant, tool=pending["tool"])
    return Action.objects.create(
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
        status=Status.WAITING_APPROVAL,
        base_version=run.state_version,
        base_event_seq=run.last_event_seq,
        expires_at=db_now() + timedelta(seconds=policy.approval_seconds),
    )


@transaction.atomic
def run_move_out(*, run: Run, actor: str) -> str:
    """Fences the source of a move: returns the run's latest verified checkpoint for export
    and stops the run here (cancelled, "moved"), in one transaction, so an approved intent can
    never be executed in two places. A write in doubt refuses: reconcile it here first."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.phase in TERMINAL_PHASES:
        raise InvalidTransition(f"run is already {run.phase}: there is nothing to move")
    in_doubt = run.actions.filter(status__in=[Status.IN_FLIGHT, Status.UNCERTAIN])
    if doubtful := list(in_doubt.values_list("action_id", flat=True)):
        raise InvalidTransition(
            f"actions {doubtful} may have been applied: reconcile them here before moving the run"
        )
    checkpoint, _ = latest_verified(run)
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
    return checkpoint.body


@transaction.atomic
def run_recover(*, run: Run, actor: str, reason: str) -> Run:
    """The way back for a run a worker stopped because its checkpoint was refused: once a
    person confirms, the run's state is re-derived from its verified events, signed anew with
    the current key, and the run goes on (`running`). The writes the stop cancelled stay
    cancelled: the agent proposes again, and each new intent is approved again. Writes in
    doubt are reconciled first."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.phase != Phase.FAILED or not run.stop_reason.startswith(REFUSED_REASON_PREFIX):
        raise InvalidTransition("only a run stopped because its checkpoint was refused recovers")
    if not reason.strip():
        raise InvalidArguments("say why: a recovery is audited with its reason")
    if doubtful := list(
        run.actions.filter(status__in=[Status.IN_FLIGHT, Status.UNCERTAIN]).values_list(
            "action_id", flat=True
        )
    ):
        raise InvalidTransition(f"actions {doubtful} are in doubt: reconcile them first")
    if problems := events_verify(run):
        raise InvalidTransition("its events do not verify: " + "; ".join(problems))
    refusal = run.stop_reason
    append_event(
        run,
        type="run.recovered",
        actor=actor,
        payload={"reason": reason, "refusal": refusal},
        changes={"phase": Phase.RUNNING, "stop_reason": "", "pending_work": []},
    )
    checkpoint_write(run)
    audit_record(
        actor=actor,
        verb="run.recover",
        tenant=run.tenant,
        object_type="run",
        object_id=str(run.pk),
        reason=reason,
        data={"refusal": refusal, "state_version": run.state_version},
    )
    return run
