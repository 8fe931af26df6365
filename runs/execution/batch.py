"""The protocol's two transactions for a batch of claimed actions, set-based.

Protocol step 2 for every action of the batch is one transaction (`attempts_begin`): the
leases checked, locked and renewed, the runs held at the versions their grants bind, every
grant checked against rows read once, and the Attempts inserted and the actions moved to
`in_flight` in one statement each (rows only, as one by one: no event, no checkpoint). Step 4
for every receipt is one transaction too (`receipts_record`): one event per run appended by
one compare-and-set UPDATE of all the runs, each charging its attempt to the budget, and each
run's one checkpoint of the write, built from the rows in hand. Each step keeps exactly the
single protocol's meaning (runs.services.protocol): the same rows, events, checkpoints and
guards; only the number of statements and commits changes. When any guard of the batch finds
a row moved (a run or an action changed since it was read), the whole transaction rolls back
and the caller hands each action to the single protocol, which decides it as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from control.foundation.clock import db_now
from control.foundation.tenancy import roles_of_members
from runs.exceptions import GrantMismatch, StaleState, UnsignedRows
from runs.models import TERMINAL_PHASES, Action, Attempt, Receipt, Run
from runs.record.carry import build_state
from runs.record.checkpoints import checkpoints_write, state_document
from runs.record.completed import action_entry
from runs.record.direct_sql import actions_move, events_after, rows_insert
from runs.record.events import LeaseToken, append_events, runs_hold
from runs.services import (
    checkpoint_or_stop,
    evidence,
    grant_problem,
    leases_held,
    leases_release,
    limit_reached,
    without,
)
from runs.services.protocol import (
    attempts_finish,
    budget_spent,
    phase_after_action,
    receipt_check,
)
from runs.tools.base import Tool
from runs.tools.calls import ToolReceipt
from runs.tools.retry import RetryPolicy

Status = Action.Status


@dataclass
class Step:
    """One claimed action on its way through the batch, with what the steps learn of it."""

    action: Action  # loaded with its run, tenant, observation, plan and approvals
    lease: LeaseToken
    tool: Tool
    policy: RetryPolicy
    attempt: Attempt | None = None
    receipt: ToolReceipt | None = None


@dataclass
class Begun:
    """What attempts_begin did: `begun` are in flight now; `lost` no longer hold their
    lease (nothing was written for them); `left` are not to be sent as they are (a grant
    rule fails, the run stopped, its deadline passed or its budget is spent): nothing was
    written for them, and the single protocol refuses or stops them, with its events."""

    begun: list[Step]
    lost: list[Step]
    left: list[Step]


@transaction.atomic
def attempts_begin(steps: list[Step], *, worker: str) -> Begun:
    """Protocol step 2 for the batch, as read by the caller (approved or due for a retry):
    a row moved since it was read raises StaleState, and nothing is kept."""
    held = leases_held([step.lease for step in steps], renew=True)
    lost = [step for step in steps if step.lease.run_id not in held]
    steps = [step for step in steps if step.lease.run_id in held]
    runs_hold([step.action.run for step in steps])  # at the versions the grants bind
    now = db_now()
    problems = _grant_problems(steps, now=now)
    sendable = [step.action.pk not in problems and _may_send(step, now) for step in steps]
    left = [step for step, ok in zip(steps, sendable, strict=True) if not ok]
    steps = [step for step, ok in zip(steps, sendable, strict=True) if ok]
    if not steps:
        return Begun(begun=[], lost=lost, left=left)
    started = timezone.now()
    attempts = rows_insert(
        [
            Attempt(
                action=step.action,
                number=step.action.attempt_count + 1,
                worker=worker,
                lease_version=step.lease.version,
                started_at=started,
            )
            for step in steps
        ],
    )
    _move(
        [step.action for step in steps],
        {Status.APPROVED, Status.RETRY_WAIT},
        Status.IN_FLIGHT,
        attempt_begun=True,
    )
    for step, attempt in zip(steps, attempts, strict=True):
        step.attempt = attempt
        step.action.attempt_count = attempt.number
    return Begun(begun=steps, lost=lost, left=left)


def _may_send(step: Step, now) -> bool:
    """attempt_begin's checks of the run: not stopped, before its deadline, within budget."""
    run = step.action.run
    return run.phase not in TERMINAL_PHASES and limit_reached(run, now) is None


@transaction.atomic
def receipts_record(steps: list[Step], *, worker: str) -> list[Step]:
    """Protocol step 4 for every step whose call answered with its receipt: the receipts,
    the attempts succeeded, the actions succeeded, one event per run chaining the receipt
    onto its completed digest, each run's checkpoint, and the leases released. Returns the
    steps whose lease was lost (nothing recorded for them: the new owner settles them by
    key). StaleState when a row moved, ReceiptRefused (protocol.receipt_check) when a
    receipt proves another write: nothing is kept."""
    held = leases_held([step.lease for step in steps])
    lost = [step for step in steps if step.lease.run_id not in held]
    steps = [step for step in steps if step.lease.run_id in held]
    if not steps:
        return lost
    for step in steps:
        receipt_check(step.receipt, step.action)
    receipts = [
        Receipt(
            tenant_id=step.action.tenant_id,
            action=step.action,
            idempotency_key=step.receipt.idempotency_key or "",
            intent_digest=step.receipt.intent_digest,
            receipt_id=step.receipt.receipt_id,
            target_version=step.receipt.target_version,
            status=step.receipt.status,
            raw_response_hash=step.receipt.raw_response_hash,
            source=Receipt.Source.RESPONSE,
        )
        for step in steps
    ]
    rows_insert(receipts)
    charged = attempts_finish(
        Attempt.objects.filter(pk__in=[step.attempt.pk for step in steps]),
        status=Attempt.Status.SUCCEEDED,
        finished_at=timezone.now(),
    )
    if charged != len(steps):
        raise StaleState(f"{len(steps) - charged} of {len(steps)} attempts settled since begun")
    _move(
        [step.action for step in steps],
        {Status.IN_FLIGHT},
        Status.SUCCEEDED,
        error_class="",
        last_error="",
    )
    evidence.executed_stated(
        [(step.action, receipt) for step, receipt in zip(steps, receipts, strict=True)]
    )
    runs = [step.action.run for step in steps]
    append_events(
        [
            (
                run,
                {
                    "type": "action.succeeded",
                    "actor": worker,
                    "action": step.action,
                    "payload": {
                        "receipt_id": step.receipt.receipt_id,
                        "source": Receipt.Source.RESPONSE,
                        "target_version": step.receipt.target_version,
                    },
                    "changes": {
                        **budget_spent(run, 1),
                        "phase": phase_after_action(run, step.action),
                        "pending_work": without(run.pending_work, step.action.action_id),
                    },
                    "completed": action_entry(step.action),
                },
            )
            for run, step in zip(runs, steps, strict=True)
        ]
    )
    signed, refused = [], []
    for run in runs:
        try:
            signed.append((run, _state_after_receipt(run)))
        except UnsignedRows:
            refused.append(run)
    if signed:
        checkpoints_write(signed)
    for run in refused:  # its receipt stays recorded; the run stops for a person
        checkpoint_or_stop(run)
    leases_release([step.lease for step in steps])
    return lost


def _state_after_receipt(run: Run) -> dict:
    """A run that goes on executing is a plan with a next item to read (carried forward from
    its signed chain: UnsignedRows when its rows differ); any other run holds no open intent
    once its write succeeded (one open write per run outside plans)."""
    if run.phase == Run.Phase.EXECUTING:
        return build_state(run)
    return state_document(run, pending=None, approval=None, in_doubt=[])


def _move(actions: list[Action], expected: set[str], status: str, **fields) -> None:
    """action_set_status for many: one compare-and-set UPDATE; StaleState unless all moved.
    With attempt_begun=True each action's attempt_count is one higher in the row; the caller
    sets it on the objects."""
    moved = actions_move([a.pk for a in actions], expected=expected, status=status, **fields)
    if moved != len(actions):
        raise StaleState(f"{len(actions) - moved} of {len(actions)} actions moved since read")
    fields.pop("attempt_begun", None)
    for action in actions:
        action.status = status
        for name, value in fields.items():
            setattr(action, name, value)


def _grant_problems(steps: list[Step], *, now) -> dict:
    """grant_check for every step from two queries: {action pk: GrantMismatch}."""
    needing = [step for step in steps if step.action.needs_approval]
    if not needing:
        return {}
    decisions = {step.action.pk: list(step.action.approvals.all()) for step in needing}
    roles = roles_of_members(
        {grant.approver_id for found in decisions.values() for grant in found},
        {step.action.run.tenant_id for step in needing},
    )
    own_events = _own_event_counts([step.action for step in needing])
    problems: dict = {}
    for step in needing:
        problem: GrantMismatch | None = grant_problem(
            step.action,
            decisions[step.action.pk],
            roles=roles,
            now=now,
            own_events=own_events.get(step.action.run_id, 0),
        )
        if problem is not None:
            problems[step.action.pk] = problem
    return problems


def _own_event_counts(actions: list[Action]) -> dict:
    """runs.services.own_events_since_proposal counted for many actions of distinct runs,
    from one read of their runs' events since the earliest base: {run id: count}."""
    by_run = {action.run_id: action for action in actions}
    since = events_after(list(by_run), min(action.base_event_seq for action in actions))
    counts: dict = {}
    for run_id, seq, action_id, plan_id in since:
        action = by_run[run_id]
        if seq <= action.base_event_seq:
            continue
        mine = action_id == action.pk if action.plan_id is None else plan_id == action.plan_id
        counts[run_id] = counts.get(run_id, 0) + mine
    return counts
