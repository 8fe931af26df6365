"""Compensation for runs whose plan declares `"compensate_on_failure": true`.

When a step fails for good, the completed steps whose tools declare a compensation are undone
in reverse order, each as a normal intent (`undo-<action_id>`) with its own key, approval per
policy, lease and receipt. When the last one has its receipt the run stops as failed with the
original reason. A compensation that ends uncertain becomes a reconciliation case like any
other write. One that fails for good is not compensated itself: it opens a case for a person
(reason `compensation_failed`: undo it by hand, or accept it stays done), the remaining
compensations go on, and the run ends failed with its original reason and what was not undone.
A completed step whose tool is no longer configured cannot be judged, and one whose
compensation's connector is not enabled for the tenant cannot be undone: the stop reason
names each.
"""

from __future__ import annotations

from control.foundation.canonical import content_hash
from runs.models import TERMINAL_PHASES, Action, Run
from runs.record.events import LeaseToken, append_event
from runs.record.outbox import OPEN_CASE_JOB
from runs.selectors import connectors_enabled, tenant_tool
from runs.services import (
    COMPENSATION_PREFIX,
    action_propose,
    observation_record,
    outbox_write,
    without,
)
from runs.tools.calls import ToolReceipt
from runs.tools.errors import UnsupportedTool
from runs.tools.registry import get_tool

Phase = Run.Phase


def is_compensation(action: Action) -> bool:
    return action.action_id.startswith(COMPENSATION_PREFIX)


def _completed_steps(run: Run) -> tuple[list[Action], list[str]]:
    """The run's completed writes whose tools declare a compensation the tenant may send,
    most recent first; and why each of the others that may need undoing cannot be: its tool
    is no longer configured (nobody can tell), or its compensation's connector is not
    enabled for the tenant."""
    done = (
        run.actions.filter(status=Action.Status.SUCCEEDED)
        .select_related("receipt")
        .order_by("-receipt__created_at")
    )
    enabled = connectors_enabled(tenant=run.tenant)
    compensable, problems = [], []
    for action in done:
        if is_compensation(action):
            continue
        step = f"{action.action_id} ({action.tool} {action.contract_version})"
        try:
            tool = get_tool(action.tool, action.contract_version)
        except UnsupportedTool:
            problems.append(
                f"cannot tell whether {step} needs undoing: not configured on this server"
            )
            continue
        if not tool.compensation:
            continue
        try:
            tenant_tool(tenant=run.tenant, name=tool.compensation, enabled=enabled)
        except UnsupportedTool as error:
            problems.append(f"cannot undo {step}: {error}")
            continue
        compensable.append(action)
    return compensable, problems


def step_failed(
    run: Run,
    *,
    action: Action,
    reason: str,
    actor: str,
    lease: LeaseToken | None,
    spent: dict | None = None,
) -> None:
    """The run's answer to a step that failed for good: stop, or start compensating.
    `spent`: the budget its last attempt spends (protocol.budget_spent), in the event."""
    spent = spent or {}
    if is_compensation(action):
        _compensation_failed(
            run, action=action, reason=reason, actor=actor, lease=lease, spent=spent
        )
        return
    stopped = run.phase in TERMINAL_PHASES
    compensating = run.plan.get("compensate_on_failure") and not stopped
    queue, problems = _completed_steps(run) if compensating else ([], [])
    if problems:
        # Fail closed: say so where a person reads why the run ended, never guess.
        reason += f" [{'; '.join(problems)}]"
    if not queue:
        _action_failed(
            run,
            action=action,
            reason=reason,
            actor=actor,
            lease=lease,
            stop=not stopped,
            spent=spent,
        )
        return
    append_event(
        run,
        type="saga.compensating",
        actor=actor,
        action=action,
        lease=lease,
        payload={"reason": reason, "undo": [a.action_id for a in queue]},
        changes={
            **spent,
            "phase": Phase.RUNNING,
            "stop_reason": reason,
            "pending_work": [COMPENSATION_PREFIX + a.action_id for a in queue],
        },
    )
    _propose_next(run)


def _action_failed(
    run: Run,
    *,
    action: Action,
    reason: str,
    actor: str,
    lease: LeaseToken | None,
    stop: bool,
    spent: dict,
) -> None:
    """The step's failure as an event; `stop` also ends the run with the reason."""
    ending = {"phase": Phase.FAILED, "stop_reason": reason} if stop else {}
    append_event(
        run,
        type="action.failed",
        actor=actor,
        action=action,
        lease=lease,
        payload={"reason": reason},
        changes={**spent, **ending, "pending_work": []},
    )


def step_succeeded(run: Run, *, action: Action, actor: str) -> None:
    """After a compensation's receipt: undo the next step, or end the run as failed."""
    if not is_compensation(action) or run.phase in TERMINAL_PHASES:
        return
    _next_or_end(run, actor=actor)


def _compensation_failed(
    run: Run, *, action: Action, reason: str, actor: str, lease: LeaseToken | None, spent: dict
) -> None:
    """A compensation failed for good: a person gets a case (never a compensation of a
    compensation), the original reason stays, and the saga goes on with the others."""
    outbox_write(run, job=OPEN_CASE_JOB, action=action)
    stopped = run.phase in TERMINAL_PHASES
    if stopped or action.action_id not in run.pending_work:
        # Not part of a saga in progress (a stopped run, or one a reconciler started).
        _action_failed(
            run,
            action=action,
            reason=reason,
            actor=actor,
            lease=lease,
            stop=not stopped,
            spent=spent,
        )
        return
    append_event(
        run,
        type="saga.compensation_failed",
        actor=actor,
        action=action,
        lease=lease,
        payload={"reason": reason},
        changes={
            **spent,
            "phase": Phase.RUNNING,
            "pending_work": without(run.pending_work, action.action_id),
        },
    )
    _next_or_end(run, actor=actor)


def _next_or_end(run: Run, *, actor: str) -> None:
    if run.pending_work:
        _propose_next(run)
        return
    failed = list(
        run.events.filter(type="saga.compensation_failed")
        .order_by("seq")
        .values_list("action__action_id", flat=True)
    )
    outcome = (
        f"not undone: {', '.join(failed)}; a reconciler decides"
        if failed
        else "completed steps compensated"
    )
    append_event(
        run,
        type="saga.compensated",
        actor=actor,
        changes={"phase": Phase.FAILED, "stop_reason": f"{run.stop_reason} ({outcome})"},
    )


def _propose_next(run: Run) -> None:
    original = run.actions.select_related("receipt").get(
        action_id=run.pending_work[0].removeprefix(COMPENSATION_PREFIX)
    )
    propose_compensation(run, original=original, reason=run.stop_reason)


def propose_compensation(run: Run, *, original: Action, reason: str) -> Action:
    """Proposes the intent that undoes `original` (which must hold its receipt)."""
    tool = get_tool(original.tool, original.contract_version)
    receipt = original.receipt
    target, args = tool.compensation_call(
        receipt=ToolReceipt(
            idempotency_key=receipt.idempotency_key or None,
            intent_digest=receipt.intent_digest,
            receipt_id=receipt.receipt_id,
            target_version=receipt.target_version,
            status=receipt.status,
            raw_response_hash=receipt.raw_response_hash,
        ),
        args=original.args,
    )
    observation = observation_record(
        run=run,
        actor="countersign.saga",
        source="countersign.saga",
        ref=original.action_id,
        content_hash=content_hash(reason.encode()),
        summary=f"Undo {original.action_id} ({original.tool} {original.target}) because: {reason}",
    )
    compensation = get_tool(tool.compensation)
    proposed, _ = action_propose(
        run=run,
        action_id=COMPENSATION_PREFIX + original.action_id,
        tool=compensation.name,
        target=target,
        args=args,
        contract_version=compensation.contract_version,
        observation=observation,
        proposed_by="countersign.saga",
        derived=True,
    )
    return proposed
