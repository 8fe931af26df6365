"""A drain job's loop: claim what is due, send it in batches, hand the rest to one-by-one.

Each claim of up to 20 actions (one per run, each under its run's lease) is split in two:
- a **batch**: actions ready to send whose checkpoint verifies and matches the rows, on a
  tool whose unsent attempt is recovered by key with no person (it dedupes by key, can be
  queried by key and may be retried after an unknown outcome). A first send whose tool
  reads the target first reads it; then their attempts begin in one transaction
  (runs.execution.batch), the calls go out under one heartbeat, a connector's at most
  `concurrency` at once (runs.execution.calls), and every receipt is recorded in one
  transaction. A worker killed mid-batch leaves up to 20 attempts in `sending`; each is
  settled by key exactly as one is after any crash;
- everything else, one by one through the single protocol (runs.execution.worker): an
  action left in flight, a compensation, a tool that does not dedupe or cannot be queried
  (a crash there must leave at most one send in doubt, as it always did), and any action
  whose rows, checkpoint or run need deciding.
A batch that finds a row moved since it was read keeps nothing, and its actions go one by one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import IntegrityError
from django.db.models import F

from control.foundation.counters import count_event
from runs.exceptions import CheckpointError, ReceiptRefused, StaleState
from runs.execution import batch
from runs.execution.calls import fenced, guarded, send_all
from runs.execution.faults import fault_point
from runs.execution.worker import (
    already_satisfied,
    claim_ready,
    process_action,
    record_response,
    worker_name,
)
from runs.models import Action, Checkpoint
from runs.record.binding import intent_differences
from runs.record.checkpoints import checkpoint_verify
from runs.record.events import LeaseToken
from runs.selectors import connectors_enabled_for
from runs.services.saga import is_compensation
from runs.tools import errors as tool_errors
from runs.tools.base import Tool
from runs.tools.registry import get_tool
from runs.tools.retry import DEFAULT_POLICY, RetryPolicy

logger = logging.getLogger(__name__)
Status = Action.Status
CLAIM_SIZE = 20
# What a batch's transaction raises when a row moved since the batch read it (or another
# writer got there first, as with a reconciler's receipt): it keeps nothing, and each of
# its actions is then decided one by one, as the single protocol always did.
MOVED = (StaleState, IntegrityError)


def drain(
    *,
    worker: str | None = None,
    limit: int = 200,
    policy: RetryPolicy = DEFAULT_POLICY,
    on_full_claim: Callable[[], object] | None = None,
) -> int:
    """Processes ready actions until none is due or `limit` is reached; returns the count.
    `on_full_claim` is called whenever a claim comes back full (more may be due): the drain
    job queues a helper there, so an idle worker shares a backlog, and so the work left when
    the limit stops this drain has a job waiting for it."""
    worker = worker or worker_name()
    processed = 0
    while processed < limit:
        size = min(CLAIM_SIZE, limit - processed)
        claims = claim_ready(worker=worker, batch=size)
        if not claims:
            if processed == 0:
                count_event("duplicate_jobs")  # delivered for work done or taken already
            break
        if on_full_claim is not None and len(claims) == size:
            on_full_claim()
        failures = process_claims(claims, worker=worker, policy=policy)
        processed += len(claims)
        if failures:
            # One bad action never held its batch-mates; the job still fails.
            raise failures[0]
    return processed


def process_claims(
    claims: list[tuple[str, LeaseToken]], *, worker: str, policy: RetryPolicy = DEFAULT_POLICY
) -> list[Exception]:
    """Processes one claim's actions; returns what they raised (each logged, its lease
    released), after every action had its turn."""
    steps, single = _split(claims, policy)
    failures = _one_by_one(single, worker=worker, policy=policy)
    if steps:
        failures += _send_batch(steps, worker=worker, policy=policy)
    return failures


def _split(claims, policy: RetryPolicy) -> tuple[list[batch.Step], list]:
    """(steps for a batch, (pk, lease) pairs for the single protocol), in claim order."""
    actions = (
        Action.objects.select_related("run", "run__tenant", "observation", "plan")
        .prefetch_related("approvals")
        .in_bulk([pk for pk, _ in claims])
    )
    # Each run's checkpoint at its version now (a run that moved since is refused as stale).
    signed = Checkpoint.objects.filter(
        run_id__in=[action.run_id for action in actions.values()],
        state_version=F("run__state_version"),
    )
    checkpoints = dict(signed.values_list("run_id", "body"))
    enabled = connectors_enabled_for(action.tenant_id for action in actions.values())
    steps, single = [], []
    for action_pk, lease in claims:
        action = actions.get(action_pk)
        step = action and _step(action, lease, checkpoints.get(action.run_id), policy, enabled)
        if step:
            steps.append(step)
        else:
            single.append((action_pk, lease))
    return steps, single


def _step(
    action: Action, lease: LeaseToken, checkpoint: str | None, policy, enabled: dict
) -> batch.Step | None:
    """A batch step for `action` when nothing about it needs the single protocol. `enabled`:
    connectors_enabled_for the claimed actions' tenants."""
    if action.status not in (Status.APPROVED, Status.RETRY_WAIT) or is_compensation(action):
        return None
    try:
        tool = get_tool(action.tool, action.contract_version)
    except tool_errors.UnsupportedTool:
        return None
    if (action.tenant_id, tool.connector) not in enabled:
        return None  # the single protocol fails it closed, saying why
    if not begins_in_batch(tool):
        return None
    if checkpoint is None:
        return None  # none at the run's version: the single protocol reads and refuses
    try:
        state = checkpoint_verify(checkpoint, run=action.run)
    except CheckpointError:
        return None
    if intent_differences(state, action):
        return None
    return batch.Step(action=action, lease=lease, tool=tool, policy=tool.retry_policy or policy)


def begins_in_batch(tool: Tool) -> bool:
    """Whether an attempt of `tool` that was begun but never sent (the worker died before
    its call) is settled with no person: a query by key finds nothing, and the same key is
    sent again, harmlessly. Only such tools have their attempts begun twenty at a time."""
    return tool.dedupes_by_key and tool.queryable_by_key and tool.retry_after_uncertain_allowed


def _send_batch(steps: list[batch.Step], *, worker: str, policy: RetryPolicy) -> list[Exception]:
    steps, failures = _read_first(steps, worker=worker)
    if not steps:
        return failures
    for step in steps:
        fault_point("before_send", action_pk=step.action.pk)
    try:
        began = batch.attempts_begin(steps, worker=worker)
    except MOVED as moved:
        logger.info("worker %s: batch begin found %s; one by one", worker, moved)
        return failures + _one_by_one(_pairs(steps), worker=worker, policy=policy)
    for step in began.lost:
        fenced(step.lease, worker)
    failures += _one_by_one(_pairs(began.left), worker=worker, policy=policy)
    if not began.begun:
        return failures
    answered, call_failures = send_all(began.begun, worker=worker)
    return failures + call_failures + _record(answered, worker=worker)


def _read_first(steps: list[batch.Step], *, worker: str) -> tuple[list[batch.Step], list]:
    """A first send whose tool can read the target reads it first, as one by one: where
    the goal is already met, the read is recorded as the evidence and nothing is sent.
    Returns (the steps still to send, what raised)."""
    sending: list[batch.Step] = []
    failures: list[Exception] = []
    for step in steps:

        def read(step=step) -> bool:
            action, tool = step.action, step.tool
            first = action.attempt_count == 0 and tool.can_be_satisfied()
            if first and already_satisfied(action, tool, step.lease, worker, step.policy):
                return False  # recorded; the lease goes back
            sending.append(step)
            return True

        failures += guarded(step.lease, step.action.pk, worker, read)
    return sending, failures


def _record(answered: list[batch.Step], *, worker: str) -> list[Exception]:
    if not answered:
        return []
    try:
        lost = batch.receipts_record(answered, worker=worker)
    except (*MOVED, ReceiptRefused) as moved:
        # A receipt that proves nothing keeps nothing of the batch; one by one, the single
        # protocol refuses that one with the same ReceiptRefused and records the others.
        logger.info("worker %s: batch receipts found %s; one by one", worker, moved)
        failures = []
        for step in answered:
            failures += guarded(
                step.lease,
                step.action.pk,
                worker,
                lambda step=step: record_response(
                    step.action, step.attempt, step.receipt, lease=step.lease, worker=worker
                ),
            )
        return failures
    for step in lost:
        fenced(step.lease, worker)
    lost_runs = {step.lease.run_id for step in lost}
    for step in answered:
        if step.lease.run_id not in lost_runs:
            fault_point("after_receipt", action_pk=step.action.pk)
    return []


def _pairs(steps: list[batch.Step]) -> list[tuple[str, LeaseToken]]:
    return [(step.action.pk, step.lease) for step in steps]


def _one_by_one(claims, *, worker: str, policy: RetryPolicy) -> list[Exception]:
    """The single protocol for each (action pk, lease) of `claims`."""
    failures = []
    for action_pk, lease in claims:
        failures += guarded(
            lease,
            action_pk,
            worker,
            lambda pk=action_pk, lease=lease: process_action(
                action_pk=pk, lease=lease, worker=worker, policy=policy
            ),
        )
    return failures
