"""The execution protocol's transactional steps, one per arrow of DESIGN.md's protocol.

Each step is one transaction guarded by the run's state_version (compare-and-set) and the
worker's lease version (fencing). The external call happens between two of these steps,
never inside one; runs.execution.worker orchestrates them.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from runs.exceptions import GrantMismatch, ReceiptRefused
from runs.models import OPEN_ACTION_STATUSES, TERMINAL_PHASES, Action, Attempt, Receipt, Run
from runs.record.completed import action_entry
from runs.record.events import LeaseToken, append_event, runs_hold
from runs.record.outbox import EXECUTE_JOB
from runs.services import (
    action_set_status,
    checkpoint_or_stop,
    evidence,
    grant_check,
    lease_release,
    lease_renew,
    outbox_write,
    run_enforce_limits,
    saga,
    without,
)
from runs.tools.calls import ToolReceipt

Phase = Run.Phase
Status = Action.Status


def load_action(action_pk) -> tuple[Action, Run]:
    action = Action.objects.select_related("run", "run__tenant").get(pk=action_pk)
    return action, action.run


def phase_after_action(run: Run, action: Action) -> str:
    """The run's phase once `action` is settled. A run cancelled or stopped while its write
    was in flight keeps its terminal phase. A plan with items still to send goes on
    executing, and a job is queued for the next one (a person may have settled this one)."""
    if run.phase in TERMINAL_PHASES:
        return run.phase
    if action.plan_id is not None:
        rest = Action.objects.filter(plan_id=action.plan_id, status__in=OPEN_ACTION_STATUSES)
        if rest.exclude(pk=action.pk).exists():
            outbox_write(run, job=EXECUTE_JOB, action=action)
            return Phase.EXECUTING
    return Phase.RUNNING


def attempts_finish(attempts: QuerySet[Attempt], *, also: tuple = (), **fields) -> int:
    """Gives `attempts` their outcome (`fields`), those in `sending` and those in any status
    of `also`; returns how many were in `sending`. An attempt spends one of the run's budget
    when it leaves `sending`: the event that records its outcome charges it, since a begin
    writes no event. A begin happens only with every earlier attempt of the run settled (one
    open write per run), so the budget read at a begin counts every attempt made."""
    charged = attempts.filter(status=Attempt.Status.SENDING).update(**fields)
    if also:
        attempts.filter(status__in=also).update(**fields)
    return charged


def budget_spent(run: Run, charged: int) -> dict:
    """The event's changes for `charged` attempts settled (none when nothing was charged)."""
    return {"budget_used": run.budget_used + charged} if charged else {}


@transaction.atomic
def attempt_begin(*, action_pk, lease: LeaseToken, worker: str) -> Attempt | None:
    """Grant check and an Attempt in `sending`, in one transaction. None when there is
    nothing to send (already settled, refused, or the run stopped)."""
    action, run = load_action(action_pk)
    if action.status not in (Status.APPROVED, Status.RETRY_WAIT):
        return None
    if run.phase in TERMINAL_PHASES:
        # Stop means stop: nothing of a cancelled or stopped run is sent again.
        action_not_resent(action, run, worker=worker, finding="about to send")
        return None
    if run_enforce_limits(run=run, actor=worker):
        return None
    try:
        grant_check(action)
    except GrantMismatch as error:
        _action_refuse(action, run, lease=lease, error=error, worker=worker)
        return None
    lease_renew(lease=lease)  # a full term for the call; fenced: a lost lease raises
    runs_hold([run])  # the run at the version the grant was checked against, until commit
    attempt = Attempt.objects.create(
        action=action,
        number=action.attempt_count + 1,
        worker=worker,
        lease_version=lease.version,
        started_at=timezone.now(),
    )
    action_set_status(
        action,
        expected={Status.APPROVED, Status.RETRY_WAIT},
        status=Status.IN_FLIGHT,
        attempt_count=attempt.number,
    )
    # Rows only: the run's state and its signed checkpoint stay at the version the grant
    # binds. The attempt's outcome is the event, and it spends the budget (attempts_finish).
    return attempt


def _action_refuse(action: Action, run: Run, *, lease, error: GrantMismatch, worker: str) -> None:
    status = Status.EXPIRED if error.rule == "expired" else Status.FAILED
    action_set_status(
        action,
        expected={action.status},
        status=status,
        error_class=f"grant_{error.rule}",
        last_error=str(error),
    )
    append_event(
        run,
        type="action.refused",
        actor=worker,
        action=action,
        lease=lease,
        payload={"rule": error.rule, "detail": str(error)},
        changes={
            "phase": phase_after_action(run, action),
            "pending_work": without(run.pending_work, action.action_id),
        },
    )
    checkpoint_or_stop(run)


def action_not_resent(
    action: Action, run: Run, *, worker: str, finding: str, spent: dict | None = None
) -> None:
    """The run was cancelled or stopped: a write proven not applied (or not yet sent) is
    cancelled, never sent again, whoever asks. `spent`: what its settled attempts spend."""
    action_set_status(
        action,
        expected={
            Status.APPROVED,
            Status.RETRY_WAIT,
            Status.NEEDS_ATTENTION,
            Status.IN_FLIGHT,
            Status.UNCERTAIN,
        },
        status=Status.CANCELLED,
        last_error=f"not sent again: run is {run.phase}",
    )
    evidence.never_sent_stated([action], run=run, status=Status.CANCELLED, detail=finding[:2000])
    append_event(
        run,
        type="action.cancelled",
        actor=worker,
        action=action,
        payload={"reason": f"run is {run.phase}", "finding": finding[:2000]},
        changes=spent,
    )
    checkpoint_or_stop(run)


def receipt_check(receipt: ToolReceipt, action: Action) -> None:
    """The rule every path applies before it records a receipt as the action's proof (this
    step, and the batch's receipts_record): the receipt must carry the intent's digest, and
    the action's key when it names one. ReceiptRefused, naming the action, otherwise."""
    if receipt.intent_digest != action.intent_digest:
        raise ReceiptRefused(
            f"receipt {receipt.receipt_id} carries digest {receipt.intent_digest}, not the "
            f"intent's: it cannot prove action {action.action_id}"
        )
    if receipt.idempotency_key and receipt.idempotency_key != action.idempotency_key:
        raise ReceiptRefused(
            f"receipt {receipt.receipt_id} is under another key: it cannot prove action "
            f"{action.action_id}"
        )


@transaction.atomic
def receipt_record(
    *,
    action_pk,
    lease: LeaseToken | None,
    receipt: ToolReceipt,
    source: str,
    worker: str,
    attempt_pk=None,
    satisfied: bool = False,
    release_lease: bool = False,
) -> None:
    """Stores the proof, marks the action done and advances the run, in one transaction.
    A receipt whose digest differs from the intent's is never recorded as success."""
    action, run = load_action(action_pk)
    receipt_check(receipt, action)
    stored = Receipt.objects.create(
        tenant_id=action.tenant_id,
        action=action,
        idempotency_key=receipt.idempotency_key or "",
        intent_digest=receipt.intent_digest,
        receipt_id=receipt.receipt_id,
        target_version=receipt.target_version,
        status=receipt.status,
        raw_response_hash=receipt.raw_response_hash,
        source=source,
    )
    charged = 0
    if attempt_pk is not None:
        answered = source == Receipt.Source.RESPONSE  # else a query or a person settles it
        charged = attempts_finish(
            Attempt.objects.filter(pk=attempt_pk),
            also=() if answered else (Attempt.Status.UNCERTAIN,),
            status=Attempt.Status.SUCCEEDED if answered else Attempt.Status.SETTLED_BY_QUERY,
            finished_at=timezone.now(),
        )
    final = Status.SATISFIED if satisfied else Status.SUCCEEDED
    action_set_status(
        action,
        expected={
            Status.APPROVED,
            Status.RETRY_WAIT,
            Status.NEEDS_ATTENTION,  # found by key when a person would end it
            Status.IN_FLIGHT,
            Status.UNCERTAIN,
        },
        status=final,
        error_class="",
        last_error="",
    )
    evidence.executed_stated([(action, stored)])
    append_event(
        run,
        type=f"action.{final}",
        actor=worker,
        action=action,
        lease=lease,
        payload={
            "receipt_id": receipt.receipt_id,
            "source": source,
            "target_version": receipt.target_version,
        },
        changes={
            **budget_spent(run, charged),
            "phase": phase_after_action(run, action),
            "pending_work": without(run.pending_work, action.action_id),
        },
        completed=action_entry(action),  # the receipt row is cached on the action
    )
    saga.step_succeeded(run, action=action, actor=worker)
    checkpoint_or_stop(run)
    if source == Receipt.Source.RECONCILER:
        # A person's resolution joins the audit chain. A worker's receipt does not: the
        # receipt row and the run's hash-chained event prove it, and the chain's single head
        # row would otherwise be a lock every worker's every write waits on (issue 17).
        # Last, so the head row is locked only for the end of the transaction.
        audit_record(
            actor=worker,
            verb=f"action.{final}",
            tenant=run.tenant,
            object_type="action",
            object_id=str(action.pk),
            data={
                "receipt_id": receipt.receipt_id,
                "source": source,
                "idempotency_key": action.idempotency_key,
            },
        )
    if release_lease and lease is not None:
        lease_release(lease=lease)  # with the receipt: one commit fewer per action


@transaction.atomic
def attempt_failed(
    *,
    attempt_pk,
    lease: LeaseToken,
    error_class: str,
    detail: str,
    worker: str,
    retry_in: float | None,
    retry_after: float | None = None,
    needs_attention: bool = False,
) -> None:
    """A provable non-effect. With `retry_in` the same intent is tried again later with the
    same key. With `needs_attention` (transient failures outlasted the tool's retry window) it
    waits for an operator, the run going on. Otherwise the action fails and the run stops
    with the reason."""
    attempt = Attempt.objects.select_related("action__run").get(pk=attempt_pk)
    action, run = attempt.action, attempt.action.run
    spent = budget_spent(
        run,
        attempts_finish(
            Attempt.objects.filter(pk=attempt_pk),
            status=Attempt.Status.FAILED,
            error_class=error_class,
            error=detail[:2000],
            retry_after=retry_after,
            finished_at=timezone.now(),
        ),
    )
    if retry_in is not None:
        due = db_now() + timedelta(seconds=retry_in)
        action_set_status(
            action,
            expected={Status.IN_FLIGHT},
            status=Status.RETRY_WAIT,
            next_attempt_at=due,
            error_class=error_class,
            last_error=detail[:2000],
        )
        append_event(
            run,
            type="attempt.failed",
            actor=worker,
            action=action,
            lease=lease,
            payload={"attempt": attempt.number, "error_class": error_class, "retry_in": retry_in},
            changes={**spent, "retry_count": run.retry_count + 1, "next_eligible_at": due},
        )
    elif needs_attention:
        action_set_status(
            action,
            expected={Status.IN_FLIGHT},
            status=Status.NEEDS_ATTENTION,
            error_class=error_class,
            last_error=detail[:2000],
        )
        append_event(
            run,
            type="action.needs_attention",
            actor=worker,
            action=action,
            lease=lease,
            payload={"attempt": attempt.number, "error_class": error_class},
            changes=spent,
        )
    else:
        action_set_status(
            action,
            expected={Status.IN_FLIGHT},
            status=Status.FAILED,
            error_class=error_class,
            last_error=detail[:2000],
        )
        reason = f"{action.action_id} ({action.tool}) failed: {error_class}: {detail}"[:2000]
        evidence.failed_stated(action, error_class=error_class, detail=detail[:2000])
        saga.step_failed(run, action=action, reason=reason, actor=worker, lease=lease, spent=spent)
    checkpoint_or_stop(run)
