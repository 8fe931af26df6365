"""The steps for a write that did not simply succeed: persist an unknown outcome, ask again
by key (backing off), send again under the same key only where that is safe, or hand the action
to a person (uncertain). Each is one transaction, like runs.services.protocol. What a person
does to end a write (abandon, retry now, give up, cancel asking first) is runs.services.endings.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from control.foundation.clock import db_now
from runs.models import TERMINAL_PHASES, Action, Attempt, Run
from runs.record.events import LeaseToken, append_event
from runs.record.outbox import EXECUTE_JOB, OPEN_CASE_JOB
from runs.services import (
    action_set_status,
    checkpoint_or_stop,
    evidence,
    outbox_write,
    saga,
)
from runs.services.protocol import (
    action_not_resent,
    attempts_finish,
    budget_spent,
    load_action,
)

Phase = Run.Phase
Status = Action.Status


@transaction.atomic
def attempt_unknown(
    *, attempt_pk, lease: LeaseToken, error_class: str, detail: str, worker: str
) -> None:
    """Persists that the outcome is unknown before anything is queried."""
    attempt = Attempt.objects.select_related("action__run").get(pk=attempt_pk)
    charged = attempts_finish(
        Attempt.objects.filter(pk=attempt_pk),
        status=Attempt.Status.UNCERTAIN,
        error_class=error_class,
        error=detail[:2000],
        finished_at=timezone.now(),
    )
    # Shown on the run page and in the API while the outcome is being settled.
    Action.objects.filter(pk=attempt.action_id).update(
        error_class=error_class, last_error=detail[:2000]
    )
    append_event(
        attempt.action.run,
        type="attempt.uncertain",
        actor=worker,
        action=attempt.action,
        lease=lease,
        payload={"attempt": attempt.number, "error_class": error_class},
        changes=budget_spent(attempt.action.run, charged),
    )
    checkpoint_or_stop(attempt.action.run)


@transaction.atomic
def action_retry_same_key(
    *, action_pk, lease: LeaseToken | None, finding: str, worker: str
) -> None:
    """The same intent goes again under the same key: a query proved the earlier send had no
    effect and the tool dedupes by key, or a reconciler resolved a case as not applied.
    Without a lease this is a person's resolution of an uncertain action."""
    action, run = load_action(action_pk)
    spent = budget_spent(
        run,
        attempts_finish(
            action.attempts.all(),
            also=(Attempt.Status.UNCERTAIN,),
            status=Attempt.Status.SETTLED_BY_QUERY,
            error=finding,
            finished_at=timezone.now(),
        ),
    )
    if run.phase in TERMINAL_PHASES:
        action_not_resent(action, run, worker=worker, finding=finding, spent=spent)
        return
    action_set_status(
        action,
        expected={Status.IN_FLIGHT, Status.UNCERTAIN},
        status=Status.RETRY_WAIT,
        next_attempt_at=db_now(),
    )
    resumed = run.phase == Phase.WAITING_RECONCILIATION
    append_event(
        run,
        type="action.requeued",
        actor=worker,
        action=action,
        lease=lease,
        payload={"finding": finding},
        changes={**spent, "phase": Phase.EXECUTING} if resumed else spent,
    )
    outbox_write(run, job=EXECUTE_JOB, action=action)
    checkpoint_or_stop(run)


# A query by key that keeps failing is asked again after 2, 4, 8... seconds (at most
# QUERY_BACKOFF_CAP); after QUERY_ATTEMPTS failures the action goes to a person.
QUERY_ATTEMPTS = 6
QUERY_BACKOFF_CAP = 300.0


@transaction.atomic
def query_failed(*, action_pk, lease: LeaseToken, detail: str, worker: str, reason: str) -> None:
    """One more query by key that proved nothing, recorded as an event. Backs off, capped;
    after QUERY_ATTEMPTS the action is uncertain with every failed query as its finding."""
    action, run = load_action(action_pk)
    failures = [
        *run.events.filter(action=action, type="query.failed").values_list(
            "payload__detail", flat=True
        ),
        detail,
    ]
    append_event(
        run,
        type="query.failed",
        actor=worker,
        action=action,
        lease=lease,
        payload={"detail": detail[:2000], "failures": len(failures)},
    )
    if len(failures) >= QUERY_ATTEMPTS:
        action_uncertain(
            action_pk=action_pk,
            lease=lease,
            reason=reason,
            worker=worker,
            detail=f"{len(failures)} queries by key proved nothing: " + " | ".join(failures),
        )
        return
    pause = min(2.0 ** len(failures), QUERY_BACKOFF_CAP)
    Action.objects.filter(pk=action.pk, status=Status.IN_FLIGHT).update(
        next_attempt_at=db_now() + timedelta(seconds=pause)
    )
    checkpoint_or_stop(run)


@transaction.atomic
def action_uncertain(
    *,
    action_pk,
    lease: LeaseToken | None,
    reason: str,
    detail: str,
    worker: str,
    expected: frozenset[str] = frozenset({Status.IN_FLIGHT}),
) -> None:
    """Nothing proves the effect either way: stop the run's writes and hand the action to
    reconciliation (fail closed). `expected`: the statuses it may leave; without a lease,
    a person's cancel or give-up of a write waiting to go again (ask_before_ending)."""
    action, run = load_action(action_pk)
    charged = attempts_finish(
        action.attempts.all(),
        status=Attempt.Status.UNCERTAIN,
        error_class=reason,
        error=detail[:2000],
        finished_at=timezone.now(),
    )
    action_set_status(
        action,
        expected=set(expected),
        status=Status.UNCERTAIN,
        error_class=reason,
        last_error=detail[:2000],
    )
    stopped = run.phase in TERMINAL_PHASES
    append_event(
        run,
        type="action.uncertain",
        actor=worker,
        action=action,
        lease=lease,
        payload={"reason": reason, "detail": detail[:2000]},
        changes={
            **budget_spent(run, charged),
            "phase": run.phase if stopped else Phase.WAITING_RECONCILIATION,
        },
    )
    outbox_write(run, job=OPEN_CASE_JOB, action=action)
    checkpoint_or_stop(run)


@transaction.atomic
def action_unsupported(
    *,
    action_pk,
    lease: LeaseToken,
    detail: str,
    worker: str,
    error_class: str = "unsupported_tool",
) -> None:
    """The action's tool (or its contract version) is no longer registered, or its connector
    is no longer enabled for the tenant (error_class `connector_not_enabled`). Not yet sent:
    it fails closed and the run stops with the reason. In flight: nothing may query it, so
    it is uncertain and a person reconciles it."""
    action, run = load_action(action_pk)
    if action.status == Status.IN_FLIGHT:
        action_uncertain(
            action_pk=action_pk,
            lease=lease,
            reason=error_class,
            detail=detail,
            worker=worker,
        )
        return
    action_set_status(
        action,
        expected={Status.APPROVED, Status.RETRY_WAIT},
        status=Status.FAILED,
        error_class=error_class,
        last_error=detail[:2000],
    )
    evidence.failed_stated(action, error_class=error_class, detail=detail[:2000])
    reason = f"{action.action_id} ({action.tool} {action.contract_version}): {detail}"[:2000]
    saga.step_failed(run, action=action, reason=reason, actor=worker, lease=lease)
    checkpoint_or_stop(run)
