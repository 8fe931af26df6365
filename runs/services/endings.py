"""A person ends a write: abandons one in doubt, or sends once more ("retry now, same key") or
gives up on one that outlasted its retry window; and, before a cancel or a give-up reports a
write as not sent, the tool is asked by the key whether it holds it (ask_before_ending).
The automatic steps these build on are runs.services.recovery.
"""

from __future__ import annotations

import logging

from django.db import transaction

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from control.foundation.tenancy import APPROVER_ROLES, has_any_role
from runs.exceptions import InvalidArguments, NotAllowed, StaleState
from runs.models import TERMINAL_PHASES, Action, Receipt, Run
from runs.record.events import append_event
from runs.record.outbox import EXECUTE_JOB
from runs.services import (
    action_set_status,
    checkpoint_or_stop,
    evidence,
    outbox_write,
    run_cancel,
    saga,
)
from runs.services.protocol import load_action, receipt_record
from runs.services.recovery import action_uncertain
from runs.tools import errors as tool_errors
from runs.tools.calls import ToolReceipt
from runs.tools.registry import get_tool
from runs.tools.retry import DEFAULT_POLICY

logger = logging.getLogger(__name__)
Status = Action.Status


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
    evidence.failed_stated(action, error_class=error_class, detail=f"by {actor}: {reason}"[:2000])
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
