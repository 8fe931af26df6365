"""The steps for a write that did not simply succeed: persist an unknown outcome, ask again
by key (backing off), send again under the same key only where that is safe, or hand the action
to a person (uncertain); a person's abandon; and an operator's "retry now (same key)" or "give
up" for a write that outlasted its retry window. Each is one transaction, like
runs.services.protocol.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from control.foundation.tenancy import APPROVER_ROLES, has_any_role
from runs.exceptions import InvalidArguments, NotAllowed, StaleState
from runs.models import TERMINAL_PHASES, Action, Attempt, Receipt, Run
from runs.record.events import LeaseToken, append_event
from runs.record.outbox import EXECUTE_JOB, OPEN_CASE_JOB
from runs.services import (
    action_set_status,
    checkpoint_or_stop,
    outbox_write,
    run_cancel,
    saga,
)
from runs.services.protocol import (
    action_not_resent,
    attempts_finish,
    budget_spent,
    load_action,
    receipt_record,
)
from runs.tools import errors as tool_errors
from runs.tools.calls import ToolReceipt
from runs.tools.registry import get_tool
from runs.tools.retry import DEFAULT_POLICY

logger = logging.getLogger(__name__)
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
    reason = f"{action.action_id} ({action.tool} {action.contract_version}): {detail}"[:2000]
    saga.step_failed(run, action=action, reason=reason, actor=worker, lease=lease)
    checkpoint_or_stop(run)


@transaction.atomic
def action_abandon(*, action_pk, reason: str, actor: str) -> None:
    """A person gives up on an uncertain action: it fails, and the run stops (or, in a saga,
    compensates its completed steps) with the reason."""
    action, run = load_action(action_pk)
    _fail_for_good(
        action, run, expected=Status.UNCERTAIN, error_class="abandoned", reason=reason, actor=actor
    )


def _fail_for_good(
    action: Action, run: Run, *, expected: str, error_class: str, reason: str, actor: str
) -> None:
    """A person ends a write: it fails with the reason, and the run answers as to any failure
    for good (stops, or compensates its completed steps)."""
    action_set_status(
        action,
        expected={expected},
        status=Status.FAILED,
        error_class=error_class,
        last_error=reason[:2000],
    )
    said = error_class.replace("_", " ")
    saga.step_failed(
        run,
        action=action,
        reason=f"{action.action_id} ({action.tool}) {said} by {actor}: {reason}"[:2000],
        actor=actor,
        lease=None,
    )
    checkpoint_or_stop(run)


def _operator(user, run: Run, doing: str) -> str:
    if not has_any_role(user, run.tenant, APPROVER_ROLES):
        raise NotAllowed(f"only an operator of this tenant may {doing}")
    return user.get_username()


@transaction.atomic
def action_retry_now(*, action_pk, user) -> None:
    """An operator sends a write that outlasted its retry window once more, now, under the
    same key (the tool sees the same intent; no new key is minted). The grant still binds:
    an expired approval refuses the send."""
    action, run = load_action(action_pk)
    actor = _operator(user, run, "retry a write")
    action_set_status(
        action,
        expected={Status.NEEDS_ATTENTION},
        status=Status.RETRY_WAIT,
        next_attempt_at=db_now(),
    )
    append_event(run, type="action.retry_now", actor=actor, action=action)
    outbox_write(run, job=EXECUTE_JOB, action=action)
    checkpoint_or_stop(run)
    audit_record(
        actor=actor,
        verb="action.retry_now",
        tenant=run.tenant,
        object_type="action",
        object_id=str(action.pk),
        data={"idempotency_key": action.idempotency_key},
    )


def action_give_up(*, action_pk, user, reason: str) -> str:
    """An operator gives up on a write that outlasted its retry window: it fails with the
    reason, and the run stops (or compensates its completed steps) as after any failure.
    Only once the tool, asked by the key, holds nothing under it (ask_before_ending): a write
    it holds is recorded as succeeded instead, one nothing proves either way is uncertain (a
    case). Returns the write's status: failed, succeeded or uncertain."""
    action, run = load_action(action_pk)
    actor = _operator(user, run, "give up on a write")
    if not reason.strip():
        raise InvalidArguments("say why: giving up is audited with its reason")
    found = ASKED_ABSENT
    if action.status == Status.NEEDS_ATTENTION:
        found = ask_before_ending(action_pk=action.pk, actor=actor)
    if found == ASKED_ABSENT:
        _give_up(action_pk=action.pk, actor=actor, reason=reason)
        return Status.FAILED
    if found not in (Status.SUCCEEDED, Status.UNCERTAIN):
        raise StaleState(f"action {action.action_id} is {found} now, no longer waiting")
    audit_record(
        actor=actor,
        verb="action.give_up",
        tenant=run.tenant,
        object_type="action",
        object_id=str(action.pk),
        reason=reason,
        data={"refused": f"asked by its key, the write is {found}"},
    )
    return found


@transaction.atomic
def _give_up(*, action_pk, actor: str, reason: str) -> None:
    action, run = load_action(action_pk)
    _fail_for_good(
        action,
        run,
        expected=Status.NEEDS_ATTENTION,
        error_class="given_up",
        reason=reason,
        actor=actor,
    )
    audit_record(
        actor=actor,
        verb="action.give_up",
        tenant=run.tenant,
        object_type="action",
        object_id=str(action.pk),
        reason=reason,
    )


# --- Before a person ends a write that may have committed -----------------------------------

# Writes waiting to be sent again. After an attempt, one may have committed although its answer
# was an error: a tool that dedupes by key is simply sent again after a 5xx, so the worker
# never asked it what happened.
WAITING_TO_GO_AGAIN = frozenset({Status.RETRY_WAIT, Status.NEEDS_ATTENTION})
ASKED_ABSENT = "absent"


def ask_before_ending(*, action_pk, actor: str) -> str:
    """Before a cancel or a give-up reports a write as not started or failed: a write waiting
    to go again after an attempt is asked for by its key, outside any transaction, as
    recovery does. Returns
    - "succeeded": the tool holds it; its receipt is recorded and the write is done;
    - ASKED_ABSENT: nothing under the key (or never attempted): it may end as not sent;
    - "uncertain": nothing proves it either way; it is handed to reconciliation (a case).
    A write in any other status is left as it is and answered with its status."""
    action, _ = load_action(action_pk)
    if action.status not in WAITING_TO_GO_AGAIN:
        return action.status
    if action.attempt_count == 0:
        return ASKED_ABSENT
    receipt, doubt = _asked_by_key(action)
    if doubt is not None:
        reason, detail = doubt
        action_uncertain(
            action_pk=action.pk,
            lease=None,
            reason=reason,
            detail=detail,
            worker=actor,
            expected=WAITING_TO_GO_AGAIN,
        )
        return Status.UNCERTAIN
    if receipt is None:
        return ASKED_ABSENT
    with transaction.atomic():
        # Held while the receipt is recorded: a worker's attempt_begin (a compare-and-set on
        # the status) waits for it and then finds the write done, never sends it again.
        locked = Action.objects.select_for_update().filter(pk=action.pk)
        status = locked.values_list("status", flat=True).get()
        if status not in WAITING_TO_GO_AGAIN:
            return status  # a worker took it first: in flight, the run's report says so
        receipt_record(
            action_pk=action.pk,
            lease=None,
            receipt=receipt,
            source=Receipt.Source.QUERY,
            worker=actor,
        )
    return Status.SUCCEEDED


def _asked_by_key(action: Action) -> tuple[ToolReceipt | None, tuple[str, str] | None]:
    """(the receipt the tool holds under the key or None, None) when the answer proves it;
    (None, (reason, detail)) when nothing does."""
    last = action.attempts.order_by("-number").values_list("error_class", flat=True).first()
    reason = last or "ended_after_send"
    try:
        tool = get_tool(action.tool, action.contract_version)
    except tool_errors.UnsupportedTool as error:
        return None, ("unsupported_tool", str(error))
    if tool.effect_class == "read_only":
        return None, None  # a read changes nothing: there is nothing to have committed
    if not tool.queryable_by_key:
        return None, (reason, "the tool cannot be queried by key; a human must check")
    try:
        with tool.contained():
            receipt = tool.query(
                action.idempotency_key,
                timeout=(tool.retry_policy or DEFAULT_POLICY).call_timeout,
                intent_digest=action.intent_digest,
            )
    except tool_errors.ToolError as error:
        return None, (reason, f"the query by key proved nothing: {error.error_class}: {error}")
    if receipt is not None and receipt.intent_digest != action.intent_digest:
        detail = f"receipt {receipt.receipt_id} carries {receipt.intent_digest}"
        return None, ("receipt_digest_mismatch", detail)
    return receipt, None


def run_cancel_asking_first(*, run: Run, reason: str, actor: str) -> dict:
    """services.run_cancel, once each write that may have committed was asked for by its key
    (ask_before_ending): the report lists such a write as done with its receipt or in doubt,
    never as not started. The edges call this, outside any transaction."""
    if run.phase not in TERMINAL_PHASES:
        run_writes_ask_by_key(run=run, actor=actor)
        run.refresh_from_db()
    return run_cancel(run=run, reason=reason, actor=actor)


def run_writes_ask_by_key(*, run: Run, actor: str) -> None:
    """ask_before_ending for each of the run's writes waiting to go again after an attempt.
    A write a worker took meanwhile is left to it: in flight, a stop reports it in doubt."""
    waiting = run.actions.filter(status__in=WAITING_TO_GO_AGAIN, attempt_count__gt=0)
    for action_pk in waiting.values_list("pk", flat=True):
        try:
            ask_before_ending(action_pk=action_pk, actor=actor)
        except StaleState as error:
            logger.info("asking %s by key before ending it: %s", action_pk, error)
