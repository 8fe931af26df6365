"""The check before a person's decision on a request (an intent alone, or a plan for all its
items) or a change to it, in the check/do shape: approval_decide, plan_decide and plan_revise
(and action_edit_and_approve) call request_check, then write.

It locks the request's row first, so two people deciding at once are taken one after the
other: the second sees the first's grant (both count towards N of M) instead of a run that
moved on under it. Then it checks, in this order, what every decision needs: the person is an
operator of the tenant; the request waits for approval and has not expired; the person saw
exactly it (its digest and the run's version, and the run changed since only by the
request's own events); the reason fits; and, for a decision, the person has not decided
already and is not the proposer under four eyes. plan_revise refuses a plan someone has
decided on already; action_edit_and_approve checks an intent
it replaces the same way, as a change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from control.foundation.clock import db_now
from control.foundation.tenancy import APPROVER_ROLES, has_any_role
from runs.exceptions import GrantMismatch, InvalidArguments, InvalidTransition, NotAllowed
from runs.models import Action, Approval, Plan, Run
from runs.services.common import refuse_plan_item

MAX_REASON = 2000


def run_unchanged_since_proposal(*, run: Run, action: Action, own_events: int) -> bool:
    """ "State version equal", the one rule behind every grant (DESIGN.md, protocol step 2):
    a grant names the version the approver saw (the intent's base_version), and since then
    nothing but this intent's own events (its grants; once executing, its attempts) may have
    changed the run. Every event adds exactly one to state_version, so that holds exactly
    when the run's version is the base plus the intent's own events."""
    return run.state_version == action.base_version + own_events


@dataclass(frozen=True)
class Checked[Request: (Action, Plan)]:
    """A request that passed request_check, its row locked until the transaction ends."""

    request: Request
    run: Run
    items: list[Action]  # the intent alone, or the plan's items in their order
    granted: frozenset[int]  # who approved it so far (user ids)
    now: datetime


def request_check[Request: (Action, Plan)](
    request: Request,
    person,
    *,
    decision: str | None,
    seen_digest: str,
    seen_state_version: int,
    reason: str,
) -> Checked[Request]:
    """The request, locked and checked for `person`'s decision (approve or reject), or, with
    decision None, for a change to it. Raises the first rule broken; writes nothing."""
    if decision is not None and decision not in Approval.Decision.values:
        raise InvalidArguments(f"decision must be approve or reject, not {decision!r}")
    locked = type(request).objects.select_for_update().get(pk=request.pk)
    # Read after the lock, in a statement of its own: a decision that waited for another
    # sees the run as that one left it. Only the request's row is locked, never the run's or
    # the tenant's.
    locked.run = run = Run.objects.select_related("tenant").get(pk=locked.run_id)
    if decision is not None:
        doing = "decide"
    else:
        doing = "change a plan" if isinstance(locked, Plan) else "edit an intent"
    if not has_any_role(person, run.tenant, APPROVER_ROLES):
        raise NotAllowed(f"only an operator of this tenant may {doing}")
    if isinstance(locked, Plan):
        what, digest = "the plan", locked.digest
    else:
        refuse_plan_item(locked)
        what, digest = "the intent", locked.intent_digest
    if locked.status != Plan.Status.WAITING_APPROVAL:
        raise InvalidTransition(f"{what} is {locked.status}, not waiting for approval")
    now = db_now()
    if locked.expires_at is None or locked.expires_at <= now:
        raise GrantMismatch("expired", "the approval request has expired; ask again")
    if seen_digest != digest:
        raise GrantMismatch("digest", f"what you saw is not {what} waiting for approval")
    items = list(locked.items.order_by("position")) if isinstance(locked, Plan) else [locked]
    granted = frozenset(
        items[0]
        .approvals.filter(decision=Approval.Decision.APPROVE)
        .values_list("approver_id", flat=True)
    )
    if seen_state_version != locked.base_version or not run_unchanged_since_proposal(
        run=run, action=items[0], own_events=len(granted)
    ):
        raise GrantMismatch("state_version", "the run changed since you looked; review it again")
    if len(reason) > MAX_REASON:
        raise InvalidArguments(f"reason is longer than {MAX_REASON} characters")
    if decision is not None and person.pk in granted:
        raise InvalidTransition("already decided by you; another operator must add theirs")
    if (
        decision == Approval.Decision.APPROVE
        and locked.four_eyes
        and items[0].proposed_by_user_id == person.pk
    ):
        raise NotAllowed("four eyes: the proposer cannot approve their own intent")
    return Checked(request=locked, run=run, items=items, granted=granted, now=now)


def grants_write(checked: Checked, approver, *, decision: str, reason: str) -> list[Approval]:
    """One decision row per item, each bound to its intent's digest, the plan's digest (for
    a plan), the version the approver saw, its target and the request's expiry (request_check
    found it set)."""
    request = checked.request
    plan_digest = request.digest if isinstance(request, Plan) else ""
    return Approval.objects.bulk_create(
        Approval(
            tenant_id=item.tenant_id,
            action=item,
            decision=decision,
            approver=approver,
            reason=reason,
            intent_digest=item.intent_digest,
            plan_digest=plan_digest,
            state_version=request.base_version,
            target_scope=item.target,
            expires_at=request.expires_at,
            created_at=checked.now,
        )
        for item in checked.items
    )
