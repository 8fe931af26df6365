"""The worker's side of the protocol: claim, verify, send, record; and recovery.

Between the transactional steps of runs.services.protocol sit the checks and the one external call:
claim the run's lease -> verify the checkpoint -> grant check + Attempt(sending) -> check the
lease again -> call the tool with the intent's key -> record the outcome. An action found
`in_flight` (a worker died mid-call) is settled by querying the tool by the same key first.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from collections.abc import Callable

from django.db import transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from control.foundation.canonical import canonical_json, content_hash
from control.foundation.counters import count_event
from runs.exceptions import CheckpointError, LeaseLost
from runs.execution.faults import fault_point
from runs.execution.heartbeat import lease_kept
from runs.models import Action, Attempt, Receipt, Run
from runs.record.binding import intent_differences
from runs.record.checkpoints import (
    REFUSED_REASON_PREFIX,
    latest_verified,
)
from runs.record.direct_sql import compiled_rows
from runs.record.events import LeaseToken, check_lease
from runs.selectors import orphaned_actions, ready_actions, tenant_tool
from runs.services import (
    lease_release,
    leases_claim,
    protocol,
    recovery,
    run_stop,
    run_stop_unsigned,
)
from runs.tools import errors as tool_errors
from runs.tools.calls import ToolCall, ToolReceipt
from runs.tools.registry import get_tool
from runs.tools.retry import DEFAULT_POLICY, RetryPolicy

logger = logging.getLogger(__name__)
Status = Action.Status
_rng = random.SystemRandom()


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# The run's lease is free: never taken, released, or expired (by the database's clock).
_lease_free = Q(run__lease__expires_at__isnull=True) | Q(run__lease__expires_at__lte=Now())


def claim_ready(*, worker: str, batch: int = 20) -> list[tuple[str, LeaseToken]]:
    """Claims up to `batch` actions that are due: approved, waiting for a retry, or left
    in flight by a worker whose lease expired. Rows are picked with SKIP LOCKED so two
    workers never contend for the same ones; the run's lease is the real claim."""
    with transaction.atomic():
        # Two index-backed reads rather than one OR across the lease join, which no index
        # serves: the ready queue first, then what crashed workers left in flight. Ready
        # actions whose run another drain holds are passed over, not tried: the oldest
        # `batch` of the queue are often exactly the ones a busy drain just claimed, and a
        # claim that tried only those would come back empty while more work waits behind.
        candidates = compiled_rows(
            ("ready claim", batch), lambda: claiming(ready_to_claim(), batch)
        )
        if len(candidates) < batch:
            left = batch - len(candidates)
            candidates += compiled_rows(
                ("orphaned claim", left), lambda: claiming(orphaned_actions(), left)
            )
        first_of_run: dict = {}  # run id -> its first candidate: one lease, one action
        for action_pk, run_id in candidates:
            first_of_run.setdefault(str(run_id), action_pk)
        taken = leases_claim(run_ids=list(first_of_run), owner=worker)
    return [(pk, taken[run_id]) for run_id, pk in first_of_run.items() if run_id in taken]


def ready_to_claim() -> QuerySet[Action]:
    """The ready queue as claim_ready reads it: due, its run's lease free, oldest first."""
    return ready_actions().filter(_lease_free).order_by("next_attempt_at")


def claiming(actions: QuerySet[Action], limit: int) -> QuerySet:
    """(pk, run_id) of up to limit of these actions, locked when read (inside a transaction);
    rows another worker holds are skipped, never waited for."""
    locking = actions.select_for_update(skip_locked=True, of=("self",))
    return locking.values_list("pk", "run_id")[:limit]


def process_action(
    *, action_pk, lease: LeaseToken, worker: str, policy: RetryPolicy = DEFAULT_POLICY
) -> None:
    try:
        action = Action.objects.select_related("run", "run__tenant", "observation").get(
            pk=action_pk
        )
        state = _verified_state(action.run, lease, worker)
        released = False
        # A refused checkpoint stopped the run for a person: only the lease goes back.
        if state is not None:
            try:
                # Read now, not when approved: a connector disabled since stops it here.
                tool = tenant_tool(
                    tenant=action.run.tenant,
                    name=action.tool,
                    contract_version=action.contract_version,
                )
            except tool_errors.UnsupportedTool as error:
                recovery.action_unsupported(
                    action_pk=action.pk,
                    lease=lease,
                    detail=str(error),
                    worker=worker,
                    error_class=error.error_class,
                )
            else:
                # A tool's own retry limits, window and timeouts, where it declares them.
                policy = tool.retry_policy or policy
                released = _advance(state, action, lease=lease, worker=worker, policy=policy)
    except LeaseLost as error:
        # Fenced out: another worker owns the run now; this one must not write anything.
        logger.warning("worker %s lost the lease on run %s: %s", worker, lease.run_id, error)
        count_event("fencing_rejections")
        return
    if not released:
        lease_release(lease=lease)


def _advance(state: dict, action: Action, *, lease, worker: str, policy: RetryPolicy) -> bool:
    """Settles an action left in flight, or sends one that is what was signed."""
    if action.status == Status.IN_FLIGHT:
        settle_unknown(action=action, lease=lease, worker=worker, policy=policy)
        return False
    if not _executes_what_was_signed(state, action, worker):
        return False
    return execute(action=action, lease=lease, worker=worker, policy=policy)


def _verified_state(run: Run, lease: LeaseToken, worker: str) -> dict | None:
    """The latest checkpoint's state once verified; None when it was refused (the run stops)."""
    try:
        return _latest_state(run, lease)
    except CheckpointError as error:
        if error.step == "lease":
            raise LeaseLost(str(error)) from None
        logger.error("run %s checkpoint refused: %s", run.pk, error)
        run_stop(
            run,
            phase=Run.Phase.FAILED,
            actor=worker,
            reason=f"{REFUSED_REASON_PREFIX} {error}; needs human recovery (manage.py recover_run)",
        )
        return None


def _latest_state(run: Run, lease: LeaseToken) -> dict:
    try:
        return latest_verified(run, lease=lease)[1]
    except CheckpointError as error:
        if error.step != "freshness":
            raise
    # A run row and its checkpoint commit together: a checkpoint newer than the run in hand
    # means someone advanced the run after it was read. Read it again, once; a checkpoint
    # that still does not fit the run is refused.
    run.refresh_from_db()
    return latest_verified(run, lease=lease)[1]


def _executes_what_was_signed(state: dict, action: Action, worker: str) -> bool:
    """Refuses (stops the run for a person, audited) an intent or grant that differs from
    the verified checkpoint: a row changed in the database without the signing key."""
    differences = intent_differences(state, action)
    if differences:
        _refuse_unsigned(action, differences, worker=worker)
    return not differences


@transaction.atomic
def _refuse_unsigned(action: Action, differences: list[str], *, worker: str) -> None:
    run_stop_unsigned(
        action.run,
        reason=f"{action.action_id} differs from its signed checkpoint: " + "; ".join(differences),
        differences=differences,
        actor=worker,
        refused=("action", action.pk),
    )


def execute(*, action: Action, lease: LeaseToken, worker: str, policy: RetryPolicy) -> bool:
    """Returns True when the lease was released with the receipt (one commit fewer)."""
    tool = get_tool(action.tool, action.contract_version)
    first = action.attempt_count == 0 and tool.can_be_satisfied()
    if first and already_satisfied(action, tool, lease, worker, policy):
        return False
    fault_point("before_send", action_pk=action.pk)
    # The attempt's transaction also renews the lease: a full term for the call.
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=worker)
    if attempt is None:
        return False
    with lease_kept(lease):
        receipt = send(action, attempt, tool, lease=lease, worker=worker, policy=policy)
    if receipt is None:
        return False
    return record_response(action, attempt, receipt, lease=lease, worker=worker)


def record_response(
    action: Action, attempt: Attempt, receipt: ToolReceipt, *, lease: LeaseToken, worker: str
) -> bool:
    """Protocol step 4 for the tool's answer; the lease goes back with it (True)."""
    protocol.receipt_record(
        action_pk=action.pk,
        lease=lease,
        receipt=receipt,
        source=Receipt.Source.RESPONSE,
        worker=worker,
        attempt_pk=attempt.pk,
        release_lease=True,
    )
    fault_point("after_receipt", action_pk=action.pk)
    return True


def send(
    action: Action,
    attempt: Attempt,
    tool,
    *,
    lease: LeaseToken,
    worker: str,
    policy: RetryPolicy,
    fence: Callable[[LeaseToken], None] = check_lease,
) -> ToolReceipt | None:
    """Protocol step 3 for a begun attempt, under the caller's heartbeat: the lease fence,
    the call with the intent's key, and what an error means. The tool's receipt, to be
    recorded by the caller; None when the outcome was recorded here (a failure, a retry
    later, or an unknown outcome settled by key). `fence` raises LeaseLost unless the lease
    is provably held (a read, by default, before every call)."""
    fault_point("attempt_recorded", action_pk=action.pk)
    # Fence before the call with a read, not a commit: a stale worker stops here.
    fence(lease)
    call = ToolCall(
        tool=action.tool,
        target=action.target,
        args=action.args,
        idempotency_key=action.idempotency_key,
        intent_digest=action.intent_digest,
    )
    try:
        with tool.contained():
            receipt = tool.execute(call, timeout=policy.call_timeout)
    except tool_errors.ToolError as error:
        if not tool.outcome_unknown_after(error):
            _record_failure(attempt, error, lease=lease, worker=worker, policy=policy)
            return None
        recovery.attempt_unknown(
            attempt_pk=attempt.pk,
            lease=lease,
            error_class=error.error_class,
            detail=str(error),
            worker=worker,
        )
        settle_unknown(action=action, lease=lease, worker=worker, policy=policy)
        return None
    fault_point("after_send_before_receipt", action_pk=action.pk)
    return receipt


def already_satisfied(
    action: Action, tool, lease: LeaseToken, worker: str, policy: RetryPolicy
) -> bool:
    """Where the target already is in the goal state, the read is the evidence: no write."""
    try:
        with tool.contained():
            state = tool.read(action.target, timeout=policy.call_timeout)
    except tool_errors.ToolError as error:
        logger.info("read before %s failed (%s); proceeding to send", action.action_id, error)
        return False
    if state is None or not tool.is_satisfied(target=action.target, args=action.args, state=state):
        return False
    evidence = ToolReceipt(
        idempotency_key=None,
        intent_digest=action.intent_digest,
        receipt_id=f"read:{action.target}@{state.get('version', 'current')}",
        target_version=state.get("version"),
        status=str(state.get("status", "satisfied")),
        raw_response_hash=content_hash(canonical_json(state)),
    )
    protocol.receipt_record(
        action_pk=action.pk,
        lease=lease,
        receipt=evidence,
        source=Receipt.Source.READ,
        worker=worker,
        satisfied=True,
    )
    return True


def _record_failure(
    attempt: Attempt,
    error: tool_errors.ToolError,
    *,
    lease: LeaseToken,
    worker: str,
    policy: RetryPolicy,
) -> None:
    retry_in = None
    if error.retriable and policy.should_retry(
        error_class=error.error_class,
        attempts_made=attempt.number,
        elapsed=time.time() - _first_attempt_started(attempt.action).timestamp(),
    ):
        retry_in = policy.next_delay(
            attempt=attempt.number, retry_after=getattr(error, "retry_after", None), rng=_rng
        )
    protocol.attempt_failed(
        attempt_pk=attempt.pk,
        lease=lease,
        error_class=error.error_class,
        detail=str(error),
        worker=worker,
        retry_in=retry_in,
        retry_after=getattr(error, "retry_after", None),
        # An outage longer than the retry window is not the end of the run: a person decides.
        needs_attention=retry_in is None and error.retriable,
    )


def _first_attempt_started(action: Action):
    return action.attempts.order_by("number").values_list("started_at", flat=True).first()


def settle_unknown(*, action: Action, lease: LeaseToken, worker: str, policy: RetryPolicy) -> None:
    """Recovery for an action whose send may have happened: query by the same key first."""
    action.refresh_from_db()
    if action.status != Status.IN_FLIGHT:
        return
    try:
        tool = tenant_tool(
            tenant=action.run.tenant, name=action.tool, contract_version=action.contract_version
        )
    except tool_errors.UnsupportedTool as error:
        # Retired, or its connector disabled for the tenant, while the call was out: nothing
        # may query it, so a person reconciles it.
        recovery.action_unsupported(
            action_pk=action.pk,
            lease=lease,
            detail=str(error),
            worker=worker,
            error_class=error.error_class,
        )
        return
    last = action.attempts.order_by("-number").first()
    reason = last.error_class if last and last.error_class else "crash_after_send"
    if not tool.queryable_by_key:
        recovery.action_uncertain(
            action_pk=action.pk,
            lease=lease,
            reason=reason,
            worker=worker,
            detail="the tool cannot be queried by key; a human must check",
        )
        return
    try:
        with tool.contained():
            receipt = tool.query(
                action.idempotency_key,
                timeout=policy.call_timeout,
                intent_digest=action.intent_digest,
            )
    except tool_errors.ToolError as error:
        # Timeouts, 5xx, malformed answers, 4xx: the query proves nothing. The action stays in
        # flight and is asked again after a growing pause; past the limit, a person decides.
        logger.info("query for %s inconclusive: %s", action.idempotency_key, error)
        recovery.query_failed(
            action_pk=action.pk,
            lease=lease,
            detail=f"{error.error_class}: {error}",
            worker=worker,
            reason=reason,
        )
        return
    if receipt is None:
        if tool.dedupes_by_key and tool.retry_after_uncertain_allowed:
            recovery.action_retry_same_key(
                action_pk=action.pk,
                lease=lease,
                worker=worker,
                finding="query by key found no effect",
            )
        else:
            recovery.action_uncertain(
                action_pk=action.pk,
                lease=lease,
                reason=reason,
                worker=worker,
                detail="no receipt by key; resend not safe",
            )
        return
    if receipt.intent_digest != action.intent_digest:
        recovery.action_uncertain(
            action_pk=action.pk,
            lease=lease,
            reason="receipt_digest_mismatch",
            worker=worker,
            detail=f"receipt {receipt.receipt_id} carries {receipt.intent_digest}",
        )
        return
    protocol.receipt_record(
        action_pk=action.pk,
        lease=lease,
        receipt=receipt,
        source=Receipt.Source.QUERY,
        worker=worker,
        attempt_pk=last.pk if last else None,
    )
