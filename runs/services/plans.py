"""Plans: one decision for an exact, bounded set of frozen intents.

An agent proposes up to MAX_PLAN_ITEMS intents at once. Each is frozen as any intent is (its
own logical id, key and digest); the plan's digest is "sha256:" + sha256 of the canonical JSON
list of their digests, sorted. A run holds the open items of one plan, or one open intent of
its own, never both (runs.models: the open-per-run constraint counts intents outside plans;
the phase does the rest: a run proposes only while running).

"State version equal" for a plan: the approver saw the run at the plan's base version, and
since then only the plan's own events (its grants; once executing, its items' attempts and
receipts) may have changed the run. Approving grants every item, each bound to its digest,
the plan digest, that state version, its target and the plan's expiry. The items then
execute one at a time in their order (runs.selectors.ready_actions): an item in doubt holds
back the rest until its case is resolved (fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from control.foundation.audit import audit_record
from control.foundation.canonical import canonical_json, content_hash, idempotency_key
from control.foundation.clock import db_now
from runs.exceptions import (
    IntentConflict,
    InvalidArguments,
    InvalidTransition,
    StaleState,
)
from runs.limits import waiting_cap_check
from runs.models import Action, Approval, Observation, Plan, Run, notify_kinds
from runs.record.authored import authored
from runs.record.events import append_event
from runs.record.outbox import EXECUTE_JOB
from runs.selectors import policy_for
from runs.services import evidence
from runs.services.common import notify_approvers, outbox_write, policy_distrusted, require_phase
from runs.services.deciding import grants_write, request_check
from runs.services.intents import intent_frozen
from runs.services.plan_summaries import plan_summary_of
from runs.services.runs import checkpoint_or_stop, run_enforce_limits

MAX_PLAN_ITEMS = 1000
Phase = Run.Phase
Status = Action.Status


@dataclass(frozen=True)
class PlanItem:
    action_id: str
    tool: str
    target: str
    args: dict[str, Any]
    contract_version: str = "v1"


def plan_digest(digests: list[str]) -> str:
    """The digest a plan's approval binds to: over its items' digests, sorted."""
    return content_hash(canonical_json(sorted(digests)))


def plan_propose(
    *, run: Run, items: list[PlanItem], observation: Observation | None, proposed_by: str
) -> tuple[Plan, bool]:
    """Freezes a plan. The same items again (the same plan digest) return the same plan
    (created=False); an item's logical id already frozen in this run is an IntentConflict."""
    if not 1 <= len(items) <= MAX_PLAN_ITEMS:
        raise InvalidArguments(f"a plan holds 1 to {MAX_PLAN_ITEMS} intents, not {len(items)}")
    frozen, seen = [], set()
    for position, item in enumerate(items):
        if item.action_id in seen:
            raise InvalidArguments(f"intents[{position}]: action_id {item.action_id!r} twice")
        seen.add(item.action_id)
        try:
            target, args, digest = intent_frozen(
                run,
                action_id=item.action_id,
                tool=item.tool,
                target=item.target,
                args=item.args,
                contract_version=item.contract_version,
            )
        except InvalidArguments as error:
            raise InvalidArguments(f"intents[{position}]: {error}") from None
        frozen.append((item, target, args, digest))
    digest = plan_digest([entry[3] for entry in frozen])
    existing = Plan.objects.filter(run=run, digest=digest).first()
    if existing is not None:
        return existing, False
    taken = sorted(
        Action.objects.filter(run=run, action_id__in=seen).values_list("action_id", flat=True)
    )
    if taken:
        raise IntentConflict(f"already frozen in this run, with other plans or arguments: {taken}")
    if observation is None:
        raise InvalidArguments("a plan needs approval, so it must rest on an observation")
    if run_enforce_limits(run=run):
        raise InvalidTransition(f"cannot propose: run is {run.phase} ({run.stop_reason})")
    waiting_cap_check(tenant_id=run.tenant_id, proposed_by=proposed_by, plan=True)
    return _plan_freeze(run, frozen, digest, observation, proposed_by), True


@transaction.atomic
def _plan_freeze(run: Run, frozen: list, digest: str, observation, proposed_by: str) -> Plan:
    require_phase(run, {Phase.RUNNING}, "propose a plan")
    if observation.run_id != run.pk:
        raise InvalidArguments("the observation belongs to another run")
    tools = sorted({entry[0].tool for entry in frozen})
    by_tool = {tool: policy_for(tenant=run.tenant, tool=tool) for tool in tools}
    policies = list(by_tool.values())
    distrusted = {tool: policy.problem for tool, policy in by_tool.items() if policy.problem}
    now = db_now()
    plan = Plan.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        digest=digest,
        observation=observation,
        proposed_by=proposed_by,
        # The strictest policy of its tools: one decision must satisfy every item's rule.
        required_approvals=max(p.required_approvals for p in policies),
        four_eyes=any(p.four_eyes for p in policies),
        expires_at=now + timedelta(seconds=min(p.approval_seconds for p in policies)),
        base_version=run.state_version + 1,
        base_event_seq=run.last_event_seq + 1,
        size=len(frozen),
        summary=plan_summary_of((e[0].tool, e[0].contract_version, e[1], e[2]) for e in frozen),
    )
    items = Action.objects.bulk_create(
        Action(
            tenant_id=run.tenant_id,
            run=run,
            plan=plan,
            position=position,
            action_id=item.action_id,
            tool=item.tool,
            target=target,
            args=args,
            contract_version=item.contract_version,
            idempotency_key=idempotency_key(
                run_id=str(run.pk),
                action_id=item.action_id,
                target=target,
                contract_version=item.contract_version,
            ),
            intent_digest=item_digest,
            observation=observation,
            proposed_by=proposed_by,
            needs_approval=True,
            four_eyes=plan.four_eyes,
            required_approvals=plan.required_approvals,
            risk=by_tool[item.tool].risk,
            status=Status.WAITING_APPROVAL,
            base_version=plan.base_version,
            base_event_seq=plan.base_event_seq,
            expires_at=plan.expires_at,
        )
        for position, (item, target, args, item_digest) in enumerate(frozen)
    )
    authored([plan.pk])
    ids = [item.action_id for item in items]
    payload = {"plan": str(plan.pk), "digest": digest, "size": len(items), "action_ids": ids}
    if distrusted:
        payload["unverified_policies"] = distrusted
    for tool, problem in distrusted.items():
        policy_distrusted(run, items[0], tool=tool, problem=problem)
    append_event(
        run,
        type="plan.proposed",
        actor=proposed_by,
        action=items[0],
        payload=payload,
        changes={
            "phase": Phase.WAITING_APPROVAL,
            "pending_work": [*ids, *(w for w in run.pending_work if w not in set(ids))],
        },
    )
    notify_approvers(run, items[0], kind=notify_kinds.REQUESTED)
    checkpoint_or_stop(run)
    return plan


@transaction.atomic
def plan_decide(
    *,
    plan: Plan,
    approver,
    decision: str,
    seen_digest: str,
    seen_state_version: int,
    reason: str = "",
    seen_view: str = "",
    via: str = evidence.SESSION,
) -> Plan:
    """One person's decision on exactly the plan they saw (its digest and the run's version,
    and its view's digest where a page showed one), for every item at once. N of M and four
    eyes apply to the plan as a whole: request_check, then a grant per item and what they
    move, then each item's decision receipt."""
    checked = request_check(
        plan,
        approver,
        decision=decision,
        seen_digest=seen_digest,
        seen_state_version=seen_state_version,
        reason=reason,
    )
    view = evidence.view_check(checked, seen_view)
    plan, run, items, now = checked.request, checked.run, checked.items, checked.now
    first, approvals = items[0], len(checked.granted) + 1
    authored(
        grant.pk for grant in grants_write(checked, approver, decision=decision, reason=reason)
    )
    actor = approver.get_username()
    if decision == Approval.Decision.REJECT:
        _items_move(plan, Status.REJECTED, decision_reason=reason)
        plan.status, plan.decision_reason = Plan.Status.REJECTED, reason
        append_event(
            run,
            type="plan.rejected",
            actor=actor,
            action=first,
            payload={"plan": str(plan.pk), "reason": reason},
            changes={"phase": Phase.RUNNING, "pending_work": _without_items(run, items)},
        )
    elif approvals >= plan.required_approvals:
        _items_move(plan, Status.APPROVED, next_attempt_at=now)
        plan.status = Plan.Status.APPROVED
        append_event(
            run,
            type="plan.approved",
            actor=actor,
            action=first,
            payload={"plan": str(plan.pk), "approvals": approvals},
            changes={"phase": Phase.EXECUTING},
        )
        outbox_write(run, job=EXECUTE_JOB, action=first)
    else:
        append_event(
            run,
            type="approval.granted",
            actor=actor,
            action=first,
            payload={"plan": str(plan.pk), "approvals": approvals},
        )
    plan.save(update_fields=["status", "decision_reason"])
    checkpoint_or_stop(run)
    entry = audit_record(
        actor=actor,
        verb=f"plan.{decision}",
        tenant=run.tenant,
        object_type="plan",
        object_id=str(plan.pk),
        reason=reason,
        data={"plan_digest": plan.digest, "size": plan.size, "state_version": seen_state_version},
    )
    evidence.decision_stated(
        checked,
        view=view,
        seen_view=seen_view,
        decision=decision,
        decider=evidence.person(approver, via),
        reason=reason,
        entry=entry,
    )
    return plan


@transaction.atomic
def plan_revise(
    *,
    plan: Plan,
    editor,
    drop: list[str],
    seen_digest: str,
    seen_state_version: int,
    reason: str,
    seen_view: str = "",
) -> Plan:
    """Drop items before deciding, like edit-then-approve: a new version of the plan (a new
    digest over the kept intents, which keep their keys and digests) replaces the one the
    editor saw; the dropped intents are cancelled. It waits for a decision as any plan."""
    if not reason.strip():
        raise InvalidArguments("say why the intents are dropped: the agent reads it")
    checked = request_check(
        plan,
        editor,
        decision=None,
        seen_digest=seen_digest,
        seen_state_version=seen_state_version,
        reason=reason,
    )
    evidence.view_check(checked, seen_view)
    plan, run, items = checked.request, checked.run, checked.items
    if checked.granted:
        raise InvalidTransition("someone already decided on this plan: reject it instead")
    dropped = [item for item in items if str(item.pk) in set(drop)]
    kept = [item for item in items if item not in dropped]
    if not dropped or len(dropped) != len(set(drop)):
        raise InvalidArguments("choose intents of this plan to drop")
    if not kept:
        raise InvalidArguments("dropping every intent is rejecting the plan: reject it")
    revised = Plan.objects.create(
        tenant_id=plan.tenant_id,
        run=run,
        digest=plan_digest([item.intent_digest for item in kept]),
        observation_id=plan.observation_id,
        proposed_by=plan.proposed_by,
        required_approvals=plan.required_approvals,
        four_eyes=plan.four_eyes,
        expires_at=plan.expires_at,
        base_version=run.state_version + 1,
        base_event_seq=run.last_event_seq + 1,
        size=len(kept),
        summary=plan_summary_of(
            (item.tool, item.contract_version, item.target, item.args) for item in kept
        ),
        supersedes=plan,
    )
    authored([revised.pk])
    plan.status = Plan.Status.SUPERSEDED
    plan.save(update_fields=["status"])
    note = f"dropped from the plan by {editor.get_username()}: {reason.strip()}"
    Action.objects.filter(pk__in=[item.pk for item in dropped]).update(
        status=Status.CANCELLED, decision_reason=note, updated_at=Now()
    )
    evidence.never_sent_stated(dropped, run=run, status=Status.CANCELLED, detail=note)
    _items_renumber(kept, into=revised, past=len(items))
    append_event(
        run,
        type="plan.revised",
        actor=editor.get_username(),
        action=kept[0],
        payload={
            "plan": str(revised.pk),
            "supersedes": str(plan.pk),
            "digest": revised.digest,
            "dropped": [item.action_id for item in dropped],
            "reason": reason.strip(),
        },
        changes={"pending_work": _without_items(run, dropped)},
    )
    checkpoint_or_stop(run)
    audit_record(
        actor=editor.get_username(),
        verb="plan.revise",
        tenant=run.tenant,
        object_type="plan",
        object_id=str(revised.pk),
        reason=reason,
        data={"supersedes": str(plan.pk), "dropped": [item.action_id for item in dropped]},
    )
    return revised


@transaction.atomic
def plan_expire(*, plan: Plan) -> bool:
    """Marks an unanswered plan expired, every item with it (never approved)."""
    plan = Plan.objects.select_for_update().select_related("run").get(pk=plan.pk)
    if plan.status != Plan.Status.WAITING_APPROVAL or plan.expires_at > db_now():
        return False
    items = list(plan.items.order_by("position"))
    _items_move(plan, Status.EXPIRED)
    plan.status = Plan.Status.EXPIRED
    plan.save(update_fields=["status"])
    run = plan.run
    evidence.never_sent_stated(items, run=run, status=Status.EXPIRED)
    append_event(
        run,
        type="plan.expired",
        actor="countersign",
        action=items[0],
        payload={"plan": str(plan.pk)},
        changes={"phase": Phase.RUNNING, "pending_work": _without_items(run, items)},
    )
    notify_approvers(run, items[0], kind=notify_kinds.EXPIRED)
    checkpoint_or_stop(run)
    return True


def _items_renumber(kept: list[Action], *, into: Plan, past: int) -> None:
    """The kept items move to the revised plan, at its base, numbered 0, 1, ... in their
    order; `past` is the old plan's size."""
    # Moved past every old position first: PostgreSQL checks (plan, position) row by row
    # within a statement, in whatever order it meets the rows, so numbering 1, 2 as 0, 1
    # directly meets a 1 not yet moved.
    Action.objects.filter(pk__in=[item.pk for item in kept]).update(
        plan=into,
        position=F("position") + past,
        base_version=into.base_version,
        base_event_seq=into.base_event_seq,
        updated_at=Now(),
    )
    # Numbered again from 0, in the same order: the sweep tells people about a plan through
    # its item at position 0, which may be one of those dropped.
    for position, item in enumerate(kept):
        item.position = position
    Action.objects.bulk_update(kept, ["position"])


def _items_move(plan: Plan, status: str, **fields) -> None:
    """Every item of the plan, all still waiting, to `status` at once (compare-and-set)."""
    moved = plan.items.filter(status=Status.WAITING_APPROVAL).update(
        status=status, updated_at=Now(), **fields
    )
    if moved != plan.size:
        raise StaleState(f"{plan.size - moved} of the plan's intents are no longer waiting")


def _without_items(run: Run, items: list[Action]) -> list[str]:
    ids = {item.action_id for item in items}
    return [work for work in run.pending_work if work not in ids]
