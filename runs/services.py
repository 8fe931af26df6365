"""Every state change of a run, an intent, a grant or a lease happens here.

Each service runs in one transaction that changes the state with compare-and-set, appends
its event (runs.events), writes the signed checkpoint and, where work follows, an outbox
message. Views, the API, jobs and commands call these and never write status fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from control.audit import audit_record
from control.canonical import idempotency_key, intent_digest
from control.clock import db_now
from control.models import Tenant
from control.tenancy import APPROVER_ROLES, has_any_role
from runs import notifications
from runs.checkpoints import checkpoint_write
from runs.events import LeaseToken, append_event
from runs.exceptions import (
    GrantMismatch,
    IntentConflict,
    InvalidArguments,
    InvalidTransition,
    LeaseBusy,
    LeaseLost,
    MissingEvidence,
    NotAllowed,
    StaleState,
)
from runs.models import (
    OPEN_ACTION_STATUSES,
    TERMINAL_PHASES,
    Action,
    Approval,
    Lease,
    Observation,
    OutboxMessage,
    Run,
    RunEvent,
    ToolPolicy,
)
from runs.outbox import deliver_after_commit
from runs.tools import errors as tool_errors
from runs.tools.registry import get_tool

EXECUTE_JOB = "runs.jobs.execute_run"
Phase = Run.Phase
Status = Action.Status


@dataclass(frozen=True)
class Policy:
    needs_approval: bool
    four_eyes: bool
    required_approvals: int
    approval_seconds: int


@transaction.atomic
def tool_policy_set(
    *,
    tenant: Tenant,
    tool: str,
    needs_approval: bool,
    four_eyes: bool,
    required_approvals: int,
    approval_seconds: int,
    actor: str,
) -> ToolPolicy:
    """Sets a tenant's approval policy for one tool; intents proposed from now on follow it
    (those already frozen keep the policy they were proposed under)."""
    try:
        get_tool(tool)
    except tool_errors.ToolError as error:
        raise InvalidArguments(str(error)) from None
    values = {
        "needs_approval": needs_approval,
        "four_eyes": four_eyes,
        "required_approvals": required_approvals,
        "approval_seconds": approval_seconds,
    }
    policy, _ = ToolPolicy.objects.update_or_create(tenant=tenant, tool=tool, defaults=values)
    audit_record(
        actor=actor,
        verb="tool_policy.set",
        tenant=tenant,
        object_type="tool_policy",
        object_id=tool,
        data=values,
    )
    return policy


def policy_for(*, tenant: Tenant, tool: str) -> Policy:
    row = ToolPolicy.objects.filter(tenant=tenant, tool=tool).first()
    if row is not None:
        return Policy(
            row.needs_approval, row.four_eyes, row.required_approvals, row.approval_seconds
        )
    return Policy(
        needs_approval=get_tool(tool).needs_approval,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=settings.COUNTERSIGN_APPROVAL_SECONDS,
    )


def outbox_write(
    run: Run, *, job: str, action: Action | None = None, payload: dict | None = None
) -> OutboxMessage:
    message = OutboxMessage.objects.create(
        tenant_id=run.tenant_id, job=job, run=run, action=action, payload=payload or {}
    )
    deliver_after_commit(message.pk)
    return message


def notify_approvers(run: Run, action: Action, *, kind: str) -> OutboxMessage:
    """Tells the tenant's operators about an approval moment, after commit, through RQ."""
    return outbox_write(
        run,
        job=notifications.NOTIFY_JOB,
        action=action,
        payload={"action": str(action.pk), "kind": kind},
    )


def approval_warn_expiring(*, action: Action) -> bool:
    """Once per request: tells operators it is about to expire. True when it wrote."""
    already = OutboxMessage.objects.filter(
        action=action, job=notifications.NOTIFY_JOB, payload__kind=notifications.EXPIRING
    ).exists()
    if already or action.status != Status.WAITING_APPROVAL:
        return False
    notify_approvers(action.run, action, kind=notifications.EXPIRING)
    return True


def action_set_status(action: Action, *, expected: set[str], status: str, **fields) -> None:
    """Compare-and-set on the action's status; a count other than 1 means someone moved first."""
    updated = Action.objects.filter(pk=action.pk, status__in=expected).update(
        status=status, updated_at=Now(), **fields
    )
    if updated != 1:
        raise StaleState(f"action {action.action_id} is no longer {sorted(expected)}")
    action.status = status
    for name, value in fields.items():
        setattr(action, name, value)


def without(work: list[str], action_id: str) -> list[str]:
    """The run's pending work once `action_id` is no longer pending."""
    return [item for item in work if item != action_id]


def _require_phase(run: Run, phases: set[str], doing: str) -> None:
    if run.phase not in phases:
        raise InvalidTransition(f"cannot {doing}: run is {run.phase}")


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
    if budget_limit is not None and budget_limit < 1:
        raise InvalidArguments("budget limit must be a positive number of tool calls")
    if deadline is not None and deadline <= db_now():
        raise InvalidArguments("deadline is already past")
    run = Run.objects.create(tenant=tenant, goal=goal, created_by=created_by)
    Lease.objects.create(run=run)
    append_event(
        run,
        type="run.started",
        actor=created_by,
        changes={
            "goal": goal,
            "phase": Phase.RUNNING,
            "plan": plan or {},
            "completed_work": [],
            "pending_work": [],
            "budget_limit": budget_limit,
            "budget_used": 0,
            "deadline": deadline,
            "versions": versions or {},
            "next_eligible_at": None,
            "retry_count": 0,
            "stop_reason": "",
            "evidence": None,
        },
    )
    checkpoint_write(run)
    return run


@transaction.atomic
def observation_record(
    *, run: Run, source: str, ref: str, content_hash: str, summary: str, actor: str
) -> Observation:
    _require_phase(run, {Phase.RUNNING}, "record an observation")
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
    append_event(
        run,
        type="observation.recorded",
        actor=actor,
        payload={
            "observation": str(observation.id),
            "source": source,
            "ref": ref,
            "content_hash": content_hash,
        },
    )
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
        status__in=[Status.WAITING_APPROVAL, Status.APPROVED, Status.RETRY_WAIT]
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


def run_effects_report(run: Run) -> dict:
    rows = run.actions.select_related("receipt").order_by("created_at")
    report: dict[str, list] = {"done": [], "in_doubt": [], "not_started": []}
    for action in rows:
        entry = {
            "action_id": action.action_id,
            "tool": action.tool,
            "target": action.target,
            "idempotency_key": action.idempotency_key,
            "status": action.status,
        }
        if action.status in (Status.SUCCEEDED, Status.SATISFIED):
            entry["receipt_id"] = action.receipt.receipt_id
            report["done"].append(entry)
        elif action.status in (Status.IN_FLIGHT, Status.UNCERTAIN):
            report["in_doubt"].append(entry)
        elif action.status in (Status.WAITING_APPROVAL, Status.APPROVED, Status.RETRY_WAIT):
            report["not_started"].append(entry)
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
    _require_phase(run, {Phase.RUNNING}, "complete")
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


def action_propose(
    *,
    run: Run,
    action_id: str,
    tool: str,
    target: str,
    args: dict,
    contract_version: str,
    proposed_by: str,
    observation: Observation | None = None,
    proposed_by_user=None,
    supersedes: Action | None = None,
) -> tuple[Action, bool]:
    """Freezes an intent. The same logical action with the same digest returns the existing
    intent (created=False); with a different digest it is an IntentConflict."""
    try:
        adapter = get_tool(tool, contract_version)
        target, args = adapter.normalize(target=target, args=args)
    except tool_errors.ToolError as error:
        raise InvalidArguments(str(error)) from None
    try:
        digest = intent_digest(tool=tool, target=target, args=args)
        idempotency_key(
            run_id=str(run.pk),
            action_id=action_id,
            target=target,
            contract_version=contract_version,
        )
    except ValueError as error:
        raise InvalidArguments(str(error)) from None
    existing = _frozen_as(run, action_id=action_id, digest=digest)
    if existing is not None:
        return existing, False
    if run_enforce_limits(run=run):
        raise InvalidTransition(f"cannot propose: run is {run.phase} ({run.stop_reason})")
    try:
        with transaction.atomic():
            return _action_freeze(
                run=run,
                action_id=action_id,
                tool=tool,
                target=target,
                args=args,
                contract_version=contract_version,
                digest=digest,
                proposed_by=proposed_by,
                observation=observation,
                proposed_by_user=proposed_by_user,
                supersedes=supersedes,
            ), True
    except IntegrityError:
        # A concurrent proposal of the same logical action won the unique constraint.
        existing = _frozen_as(run, action_id=action_id, digest=digest)
        if existing is None:
            raise
        return existing, False


def _frozen_as(run: Run, *, action_id: str, digest: str) -> Action | None:
    """The intent already frozen under this logical id, if its digest is the same one."""
    existing = Action.objects.filter(run=run, action_id=action_id).first()
    if existing is not None and existing.intent_digest != digest:
        raise IntentConflict(
            f"action {action_id!r} was frozen with digest {existing.intent_digest}; "
            "new arguments need a new action id"
        )
    return existing


@transaction.atomic
def _action_freeze(
    *,
    run,
    action_id,
    tool,
    target,
    args,
    contract_version,
    digest,
    proposed_by,
    observation,
    proposed_by_user,
    supersedes,
) -> Action:
    allowed = {Phase.WAITING_APPROVAL} if supersedes is not None else {Phase.RUNNING}
    _require_phase(run, allowed, "propose an action")
    policy = policy_for(tenant=run.tenant, tool=tool)
    if observation is not None and observation.run_id != run.pk:
        raise InvalidArguments("the observation belongs to another run")
    if policy.needs_approval and observation is None:
        raise InvalidArguments("an action that needs approval must rest on an observation")
    if supersedes is not None:
        action_set_status(supersedes, expected={Status.WAITING_APPROVAL}, status=Status.SUPERSEDED)
    now = db_now()
    action = Action.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        action_id=action_id,
        tool=tool,
        target=target,
        args=args,
        contract_version=contract_version,
        idempotency_key=idempotency_key(
            run_id=str(run.pk),
            action_id=action_id,
            target=target,
            contract_version=contract_version,
        ),
        intent_digest=digest,
        observation=observation,
        supersedes=supersedes,
        proposed_by=proposed_by,
        proposed_by_user=proposed_by_user,
        needs_approval=policy.needs_approval,
        four_eyes=policy.four_eyes,
        required_approvals=policy.required_approvals,
        status=Status.WAITING_APPROVAL if policy.needs_approval else Status.APPROVED,
        base_version=run.state_version + 1,
        base_event_seq=run.last_event_seq + 1,
        expires_at=now + timedelta(seconds=policy.approval_seconds)
        if policy.needs_approval
        else None,
        next_attempt_at=None if policy.needs_approval else now,
    )
    append_event(
        run,
        type="action.proposed",
        actor=proposed_by,
        action=action,
        payload={
            "action_id": action_id,
            "tool": tool,
            "target": target,
            "intent_digest": digest,
            "idempotency_key": action.idempotency_key,
            "supersedes": supersedes.action_id if supersedes else None,
        },
        changes={
            "phase": Phase.WAITING_APPROVAL if policy.needs_approval else Phase.EXECUTING,
            "pending_work": [action_id, *without(run.pending_work, action_id)],
        },
    )
    if policy.needs_approval:
        notify_approvers(run, action, kind=notifications.REQUESTED)
    else:
        outbox_write(run, job=EXECUTE_JOB, action=action)
    checkpoint_write(run)
    return action


@transaction.atomic
def approval_decide(
    *,
    action: Action,
    approver,
    decision: str,
    seen_digest: str,
    seen_state_version: int,
    reason: str = "",
) -> Approval:
    """Records one person's decision on exactly the intent they saw (digest and version)."""
    if decision not in Approval.Decision.values:
        raise InvalidArguments(f"decision must be approve or reject, not {decision!r}")
    run = action.run
    if not has_any_role(approver, run.tenant, APPROVER_ROLES):
        raise NotAllowed("only an operator of this tenant may decide")
    if action.status != Status.WAITING_APPROVAL:
        raise InvalidTransition(f"action is {action.status}, not waiting for approval")
    now = db_now()
    if action.expires_at is None or action.expires_at <= now:
        raise GrantMismatch("expired", "the approval request has expired; ask again")
    if seen_digest != action.intent_digest:
        raise GrantMismatch("digest", "what you saw is not the intent waiting for approval")
    grants = list(action.approvals.filter(decision=Approval.Decision.APPROVE))
    if any(grant.approver_id == approver.pk for grant in grants):
        raise InvalidTransition("already decided by you; another operator must add theirs")
    if seen_state_version != action.base_version or run.state_version != action.base_version + len(
        grants
    ):
        raise GrantMismatch("state_version", "the run changed since you looked; review it again")
    if (
        decision == Approval.Decision.APPROVE
        and action.four_eyes
        and (action.proposed_by_user_id == approver.pk)
    ):
        raise NotAllowed("four eyes: the proposer cannot approve their own intent")
    if reason and len(reason) > 2000:
        raise InvalidArguments("reason is longer than 2000 characters")
    approval = Approval.objects.create(
        tenant_id=action.tenant_id,
        action=action,
        decision=decision,
        approver=approver,
        reason=reason,
        intent_digest=action.intent_digest,
        state_version=seen_state_version,
        target_scope=action.target,
        expires_at=action.expires_at,
        created_at=now,
    )
    actor = approver.get_username()
    if decision == Approval.Decision.REJECT:
        action_set_status(
            action,
            expected={Status.WAITING_APPROVAL},
            status=Status.REJECTED,
            decision_reason=reason,
        )
        append_event(
            run,
            type="action.rejected",
            actor=actor,
            action=action,
            payload={"reason": reason},
            changes={
                "phase": Phase.RUNNING,
                "pending_work": without(run.pending_work, action.action_id),
            },
        )
    elif len(grants) + 1 >= action.required_approvals:
        action_set_status(
            action, expected={Status.WAITING_APPROVAL}, status=Status.APPROVED, next_attempt_at=now
        )
        append_event(
            run,
            type="action.approved",
            actor=actor,
            action=action,
            payload={"approvals": len(grants) + 1},
            changes={"phase": Phase.EXECUTING},
        )
        outbox_write(run, job=EXECUTE_JOB, action=action)
    else:
        append_event(
            run,
            type="approval.granted",
            actor=actor,
            action=action,
            payload={"approvals": len(grants) + 1, "required": action.required_approvals},
        )
    checkpoint_write(run)
    audit_record(
        actor=actor,
        verb=f"action.{decision}",
        tenant=run.tenant,
        object_type="action",
        object_id=str(action.pk),
        reason=reason,
        data={"intent_digest": action.intent_digest, "state_version": seen_state_version},
    )
    return approval


def derived_action_id(action: Action) -> str:
    """The next logical id in an intent's lineage: close-ticket -> close-ticket~2 -> ~3."""
    base = action.action_id.split("~", 1)[0]
    taken = Action.objects.filter(run_id=action.run_id, action_id__startswith=f"{base}~").count()
    return f"{base}~{taken + 2}"


@transaction.atomic
def action_edit_and_approve(
    *,
    action: Action,
    editor,
    args: dict,
    seen_digest: str,
    seen_state_version: int,
    reason: str = "",
) -> Action:
    """Edit then approve: a new frozen intent (new logical id, key and digest) supersedes the
    one the editor saw, and the editor's approval goes to the new one. Where four eyes are
    required the new intent waits for another operator instead."""
    if not has_any_role(editor, action.run.tenant, APPROVER_ROLES):
        raise NotAllowed("only an operator of this tenant may edit an intent")
    if action.status != Status.WAITING_APPROVAL:
        raise InvalidTransition(f"action is {action.status}, not waiting for approval")
    if seen_digest != action.intent_digest or seen_state_version != action.base_version:
        raise GrantMismatch("digest", "what you edited is not the intent waiting for approval")
    run = action.run
    if run.state_version != action.base_version + action.approvals.count():
        raise GrantMismatch("state_version", "the run changed since you looked; review it again")
    edited, _ = action_propose(
        run=run,
        action_id=derived_action_id(action),
        tool=action.tool,
        target=action.target,
        args=args,
        contract_version=action.contract_version,
        observation=action.observation,
        proposed_by=editor.get_username(),
        proposed_by_user=editor,
        supersedes=action,
    )
    if edited.intent_digest == action.intent_digest:
        raise InvalidArguments("the edit changes nothing; approve the original instead")
    audit_record(
        actor=editor.get_username(),
        verb="action.edit",
        tenant=run.tenant,
        object_type="action",
        object_id=str(edited.pk),
        reason=reason,
        data={"supersedes": str(action.pk), "before": action.args, "after": edited.args},
    )
    if edited.four_eyes:
        return edited
    approval_decide(
        action=edited,
        approver=editor,
        decision=Approval.Decision.APPROVE,
        seen_digest=edited.intent_digest,
        seen_state_version=edited.base_version,
        reason=reason,
    )
    edited.refresh_from_db()
    return edited


def action_ask_again(*, action: Action, requester) -> Action:
    """Re-proposes an expired request as a new intent (new logical id, so a new key). A
    request past its expiry that the sweep has not marked yet is marked expired first."""
    if action.status == Status.WAITING_APPROVAL:
        approval_expire(action=action)
        action.refresh_from_db()
    if action.status != Status.EXPIRED:
        raise InvalidTransition(f"only an expired request can be asked again, not {action.status}")
    if not has_any_role(requester, action.run.tenant, APPROVER_ROLES):
        raise NotAllowed("only an operator of this tenant may ask again")
    again, _ = action_propose(
        run=action.run,
        action_id=derived_action_id(action),
        tool=action.tool,
        target=action.target,
        args=action.args,
        contract_version=action.contract_version,
        observation=action.observation,
        proposed_by=requester.get_username(),
        proposed_by_user=requester,
    )
    return again


def grant_check(action: Action) -> None:
    """Is the grant valid for this exact intent now? Raises GrantMismatch naming the broken
    binding. A missing or malformed field is never approval."""
    if not action.needs_approval:
        return
    run = action.run
    decisions = list(action.approvals.select_related("approver"))
    if any(d.decision != Approval.Decision.APPROVE for d in decisions):
        raise GrantMismatch("decision", "the intent was rejected")
    now = db_now()
    approvers = set()
    for grant in decisions:
        if not grant.intent_digest or grant.intent_digest != action.intent_digest:
            raise GrantMismatch("digest", "a grant is bound to another intent")
        if grant.state_version is None or grant.state_version != action.base_version:
            raise GrantMismatch("state_version", "a grant names another state version")
        if not grant.target_scope or grant.target_scope != action.target:
            raise GrantMismatch("scope", "the target is outside a grant's scope")
        if grant.expires_at is None or grant.expires_at <= now:
            raise GrantMismatch("expired", "a grant has expired")
        if not has_any_role(grant.approver, run.tenant, APPROVER_ROLES):
            raise GrantMismatch("role", "an approver does not hold the operator role here")
        if action.four_eyes and grant.approver_id == action.proposed_by_user_id:
            raise GrantMismatch("four_eyes", "the proposer approved their own intent")
        approvers.add(grant.approver_id)
    if len(approvers) < action.required_approvals:
        raise GrantMismatch(
            "approvals", f"{len(approvers)} of {action.required_approvals} approvals"
        )
    changed_since = RunEvent.objects.filter(run=run, seq__gt=action.base_event_seq).exclude(
        action=action
    )
    if changed_since.exists():
        raise GrantMismatch("state_version", "the run changed after the intent was approved")


@transaction.atomic
def approval_expire(*, action: Action) -> bool:
    """Marks an unanswered request expired (never approved); True when it did."""
    run = action.run
    if action.status != Status.WAITING_APPROVAL or action.expires_at > db_now():
        return False
    action_set_status(action, expected={Status.WAITING_APPROVAL}, status=Status.EXPIRED)
    notify_approvers(run, action, kind=notifications.EXPIRED)
    append_event(
        run,
        type="action.expired",
        actor="countersign",
        action=action,
        changes={
            "phase": Phase.RUNNING,
            "pending_work": without(run.pending_work, action.action_id),
        },
    )
    checkpoint_write(run)
    return True


@transaction.atomic
def lease_claim(*, run_id, owner: str, seconds: int | None = None) -> LeaseToken:
    """Takes the run's lease if it is free, expired, or already ours; the version grows."""
    seconds = seconds or settings.COUNTERSIGN_LEASE_SECONDS
    claimable = Q(expires_at__isnull=True) | Q(expires_at__lte=Now()) | Q(owner=owner)
    updated = Lease.objects.filter(claimable, run_id=run_id).update(
        owner=owner,
        lease_version=F("lease_version") + 1,
        expires_at=Now() + timedelta(seconds=seconds),
    )
    if updated != 1:
        raise LeaseBusy(f"run {run_id} is leased by another worker")
    version = Lease.objects.values_list("lease_version", flat=True).get(run_id=run_id)
    return LeaseToken(run_id=str(run_id), owner=owner, version=version)


def lease_renew(*, lease: LeaseToken, seconds: int | None = None) -> None:
    seconds = seconds or settings.COUNTERSIGN_LEASE_SECONDS
    updated = Lease.objects.filter(
        run_id=lease.run_id, owner=lease.owner, lease_version=lease.version, expires_at__gt=Now()
    ).update(expires_at=Now() + timedelta(seconds=seconds))
    if updated != 1:
        raise LeaseLost(f"lease v{lease.version} on run {lease.run_id} is no longer held")


def lease_release(*, lease: LeaseToken) -> None:
    Lease.objects.filter(
        run_id=lease.run_id, owner=lease.owner, lease_version=lease.version
    ).update(expires_at=Now())


def open_action(run: Run) -> Action | None:
    return run.actions.filter(status__in=OPEN_ACTION_STATUSES).first()


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
    run = Run.objects.create(
        id=state["run_id"], tenant=tenant, goal=state["goal"], created_by=actor
    )
    Lease.objects.create(run=run)
    append_event(
        run,
        type="run.imported",
        actor=actor,
        payload={
            "source_state_version": state["state_version"],
            "source_event_head": state["event_head_hash"],
            "completed_actions": state["completed_actions"],
        },
        changes={
            "goal": state["goal"],
            "phase": Phase.WAITING_APPROVAL if pending else Phase.RUNNING,
            "plan": state["plan"],
            "completed_work": state["completed_work"],
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
