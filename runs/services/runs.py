"""A run's life: start, observations, limits, stop, cancel, complete, and restore from an import."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from control.models import Tenant
from runs.exceptions import InvalidArguments, InvalidTransition, MissingEvidence, UnsignedRows
from runs.limits import agent_data_check
from runs.models import (
    TERMINAL_PHASES,
    Action,
    Lease,
    Observation,
    Run,
)
from runs.record.carry import checkpoint_write
from runs.record.checkpoints import REFUSED_REASON_PREFIX
from runs.record.events import append_event
from runs.record.payloads import observation_recorded, run_started
from runs.record.verification import events_verify
from runs.selectors import idle_mcp_runs, run_effects_report
from runs.services import evidence
from runs.services.common import action_set_status, require_phase

logger = logging.getLogger(__name__)

Phase = Run.Phase
SYSTEM_ACTOR = "countersign"
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
    checkpoint_or_stop(run)
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
    checkpoint_or_stop(run)
    return observation


def limit_reached(run: Run, now: datetime) -> tuple[str, str] | None:
    """The run's limit that forbids another send at `now`, as (the phase it stops in, the
    reason), or None. The one statement of the rule: the single write path stops the run
    on it (run_enforce_limits), the batch leaves the write to the single path on it."""
    if run.deadline is not None and now >= run.deadline:
        return Phase.DEADLINE_EXCEEDED, "deadline passed"
    if run.budget_limit is not None and run.budget_used >= run.budget_limit:
        return Phase.BUDGET_EXHAUSTED, "budget spent"
    return None


def run_enforce_limits(*, run: Run, actor: str = SYSTEM_ACTOR) -> bool:
    """Stops a run past its deadline or out of budget; True when it stopped it."""
    if run.phase in TERMINAL_PHASES:
        return False
    reached = limit_reached(run, db_now())
    if reached is None:
        return False
    phase, reason = reached
    run_stop(run, phase=phase, reason=reason, actor=actor)
    return True


@transaction.atomic
def run_stop(run: Run, *, phase: str, reason: str, actor: str) -> dict:
    """Ends the run in `phase`: not-started actions are cancelled, in-doubt ones stay for
    reconciliation. Returns the report of effects done, in doubt and not started."""
    report = run_effects_report(run)
    not_started = list(
        run.actions.filter(
            status__in=[
                Status.WAITING_APPROVAL,
                Status.APPROVED,
                Status.RETRY_WAIT,
                Status.NEEDS_ATTENTION,
            ]
        )
    )
    for action in not_started:
        action_set_status(action, expected={action.status}, status=Status.CANCELLED)
    if not_started:
        evidence.never_sent_stated(
            not_started, run=run, status=Status.CANCELLED, detail=f"the run ended: {reason}"
        )
    append_event(
        run,
        type=f"run.{phase}",
        actor=actor,
        payload={"report": report},
        changes={"phase": phase, "stop_reason": reason, "pending_work": []},
    )
    checkpoint_write(run)  # a stopped run signs no intent: nothing to carry, nothing refused
    return report


def checkpoint_or_stop(run: Run) -> None:
    """Signs the run's new state, in the transaction that changed it. A run whose intents or
    grants in the rows differ from what its last checkpoint signed (runs.record.carry) is
    stopped for a person instead, audited: nothing of it is signed again, and what this
    transaction recorded (a receipt, a decision) stays recorded."""
    try:
        checkpoint_write(run)
    except UnsignedRows as error:
        run_stop_unsigned(
            run,
            reason=f"{REFUSED_REASON_PREFIX} {error}; needs human recovery (manage.py recover_run)",
            differences=error.problems,
            actor=SYSTEM_ACTOR,
            refused=("run", run.pk),
        )


def run_stop_unsigned(
    run: Run, *, reason: str, differences: list[str], actor: str, refused: tuple[str, object]
) -> None:
    """Stops a run whose rows differ from what its checkpoint signed, for a person (audited
    as action.refused_unsigned, naming the run or the intent that was refused)."""
    logger.error("run %s: %s", run.pk, reason)
    run_stop(run, phase=Phase.FAILED, actor=actor, reason=reason[:2000])
    audit_record(
        actor=actor,
        verb="action.refused_unsigned",
        tenant=run.tenant,
        object_type=refused[0],
        object_id=str(refused[1]),
        reason="the rows differ from the signed checkpoint; needs human recovery",
        data={"differences": differences},
    )


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
def run_complete(*, run: Run, action_ids: list[str], actor: str, reason: str = "") -> Run:
    """Completes the run only with evidence: the named actions must each hold a receipt
    (a write's, or the current read that showed the goal already satisfied). `reason`, when
    Countersign ends the run itself, says why (kept as its stop reason)."""
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
        changes={
            "phase": Phase.COMPLETED,
            "evidence": evidence,
            "pending_work": [],
            **({"stop_reason": reason} if reason else {}),
        },
    )
    checkpoint_or_stop(run)
    return run


@transaction.atomic
def run_end_idle(*, run: Run, idle_since: datetime, idle_seconds: int) -> str | None:
    """Ends an MCP session's run that nobody called since `idle_since` (runs.selectors.
    idle_mcp_runs, asked again under the run's lock), in the phase its record supports:
    `completed` with the receipts of the writes it executed as evidence, else `cancelled`
    (it proved nothing; its reads stay as observations). Never under an open write. Returns
    the phase, or None when the run is no longer idle."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if not idle_mcp_runs(idle_since=idle_since).filter(pk=run.pk).exists():
        return None
    reason = f"idle: no MCP call for {idle_seconds} s"
    executed = list(
        run.actions.filter(status__in=[Status.SUCCEEDED, Status.SATISFIED])
        .order_by("created_at")
        .values_list("action_id", flat=True)
    )
    if executed:
        run_complete(run=run, action_ids=executed, actor=SYSTEM_ACTOR, reason=reason)
    else:
        run_stop(run, phase=Phase.CANCELLED, reason=reason, actor=SYSTEM_ACTOR)
    return run.phase


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
    checkpoint_or_stop(run)
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
