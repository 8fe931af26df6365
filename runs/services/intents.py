"""Frozen intents: proposal, edit-then-approve and ask-again (each a new key and digest)."""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction

from control.foundation.audit import audit_record
from control.foundation.canonical import idempotency_key, intent_digest
from control.foundation.clock import db_now
from control.foundation.tenancy import APPROVER_ROLES, has_any_role
from runs.action_ids import reserved_action_id_refusal
from runs.exceptions import (
    IntentConflict,
    InvalidArguments,
    InvalidTransition,
    NotAllowed,
    StaleState,
)
from runs.limits import waiting_cap_check
from runs.models import (
    Action,
    Approval,
    Observation,
    Run,
    notify_kinds,
)
from runs.record.authored import authored
from runs.record.events import append_event
from runs.record.outbox import EXECUTE_JOB
from runs.record.payloads import action_proposed
from runs.selectors import policy_for, tenant_tool
from runs.selectors.decision_views import view_digest
from runs.services import evidence
from runs.services.approvals import (
    approval_decide,
    approval_expire,
)
from runs.services.common import (
    action_set_status,
    notify_approvers,
    outbox_write,
    policy_distrusted,
    refuse_plan_item,
    require_phase,
)
from runs.services.deciding import request_check
from runs.services.definitions import tool_definition_confirm
from runs.services.runs import checkpoint_or_stop, run_enforce_limits
from runs.services.standing import standing_grant_apply, standing_rules_matching
from runs.tools import errors as tool_errors

Phase = Run.Phase
Status = Action.Status


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
    derived: bool = False,
) -> tuple[Action, bool]:
    """Freezes an intent. The same logical action with the same digest returns the existing
    intent (created=False); with a different digest it is an IntentConflict. A reserved id
    (runs.action_ids) is refused unless `derived`: only the saga, edit-then-approve and
    ask-again, which build those ids themselves, pass it."""
    target, args, digest = intent_frozen(
        run,
        action_id=action_id,
        tool=tool,
        target=target,
        args=args,
        contract_version=contract_version,
        derived=derived,
    )
    existing = _frozen_as(run, action_id=action_id, digest=digest)
    if existing is not None:
        return existing, False
    if run_enforce_limits(run=run):
        raise InvalidTransition(f"cannot propose: run is {run.phase} ({run.stop_reason})")
    # Matched before the transaction: no row is locked while patterns run on agent data.
    matches = standing_rules_matching(tenant_id=run.tenant_id, tool=tool, target=target, args=args)
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
                standing_matches=matches,
                # An agent's own proposal; what Countersign or an operator derives is not.
                capped=not derived and supersedes is None,
            ), True
    except IntegrityError:
        # A concurrent proposal on this run won a unique constraint: the same logical action
        # (this intent, or a conflict) or another write (the run's one open write).
        existing = _frozen_as(run, action_id=action_id, digest=digest)
        if existing is None:
            raise StaleState("another proposal on this run won the race; propose again") from None
        return existing, False


def intent_frozen(
    run: Run,
    *,
    action_id: str,
    tool: str,
    target: str,
    args: dict,
    contract_version: str,
    derived: bool = False,
) -> tuple[str, dict, str]:
    """(target, args, digest) of an intent in normal form, or InvalidArguments naming what
    is wrong: a reserved id, a tool or version not configured, arguments the tool refuses,
    a key that cannot be built, a tool whose connector the run's tenant has not enabled.
    The tool's frozen definition is confirmed."""
    refusal = None if derived else reserved_action_id_refusal(action_id)
    if refusal is not None:
        raise InvalidArguments(refusal)
    try:
        adapter = tenant_tool(tenant=run.tenant, name=tool, contract_version=contract_version)
        target, args = adapter.normalize(target=target, args=args)
    except tool_errors.ConnectorNotEnabled as error:
        raise InvalidArguments(f"tool {tool!r} is not enabled for this tenant: {error}") from None
    except tool_errors.ToolError as error:
        raise InvalidArguments(str(error)) from None
    tool_definition_confirm(tool=adapter)
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
    return target, args, digest


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
    standing_matches,
    capped,
) -> Action:
    allowed = {Phase.WAITING_APPROVAL} if supersedes is not None else {Phase.RUNNING}
    require_phase(run, allowed, "propose an action")
    policy = policy_for(tenant=run.tenant, tool=tool)
    if observation is not None and observation.run_id != run.pk:
        raise InvalidArguments("the observation belongs to another run")
    if policy.needs_approval and observation is None:
        raise InvalidArguments("an action that needs approval must rest on an observation")
    if capped and policy.needs_approval:
        waiting_cap_check(tenant_id=run.tenant_id, proposed_by=proposed_by, plan=False)
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
        risk=policy.risk,
        status=Status.WAITING_APPROVAL if policy.needs_approval else Status.APPROVED,
        base_version=run.state_version + 1,
        base_event_seq=run.last_event_seq + 1,
        expires_at=now + timedelta(seconds=policy.approval_seconds)
        if policy.needs_approval
        else None,
        next_attempt_at=None if policy.needs_approval else now,
    )
    authored([action.pk])
    if supersedes is not None:
        evidence.never_sent_stated(
            [supersedes], run=run, status=Status.SUPERSEDED, detail=f"edited into {action_id}"
        )
    append_event(
        run,
        actor=proposed_by,
        action=action,
        **action_proposed(run=run, action=action, unverified_policy=policy.problem),
    )
    if policy.problem:
        policy_distrusted(run, action, tool=tool, problem=policy.problem)
    if not policy.needs_approval:
        evidence.unreviewed_stated(action)
        outbox_write(run, job=EXECUTE_JOB, action=action)
    elif (
        standing_grant_apply(
            run, action, allowed=policy.standing_grants_allowed, matches=standing_matches
        )
        is None
    ):
        notify_approvers(run, action, kind=notify_kinds.REQUESTED)
    checkpoint_or_stop(run)
    return action


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
    seen_view: str = "",
    via: str = evidence.SESSION,
) -> Action:
    """Edit then approve: a new frozen intent (new logical id, key and digest) supersedes the
    one the editor saw, and the editor's approval goes to the new one. Where four eyes are
    required the new intent waits for another operator instead."""
    checked = request_check(
        action,
        editor,
        decision=None,
        seen_digest=seen_digest,
        seen_state_version=seen_state_version,
        reason=reason,
    )
    seen = evidence.view_check(checked, seen_view)
    action, run = checked.request, checked.run
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
        derived=True,
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
        via=via,
        edited_from={
            "action": str(action.pk),
            "intent_digest": action.intent_digest,
            "args": action.args,
            "view_digest": view_digest(seen),
        },
    )
    edited.refresh_from_db()
    return edited


def action_ask_again(*, action: Action, requester) -> Action:
    """Re-proposes an expired request as a new intent (new logical id, so a new key). A
    request past its expiry that the sweep has not marked yet is marked expired first. A
    plan's item is refused: its plan expired as a whole, and only the agent proposes it again."""
    refuse_plan_item(action)
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
        derived=True,
    )
    return again
