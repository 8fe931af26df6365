"""What a new checkpoint signs: the run's state, with its open intents and their grants
carried forward from the last verified checkpoint, never read back from the rows alone.

A checkpoint must never launder an edit. Whoever can write to the database but lacks the
signing key can change an intent's row (its arguments and digest), insert a grant, or add
items to a plan; if the next checkpoint signed whatever the rows hold, the worker's check
before a send (runs.record.binding) would compare the rows with a copy of themselves. So:

- an open intent is signed only when the last verified checkpoint signed it (its frozen
  fields equal), or the service that froze it marked it in this transaction
  (runs.record.authored);
- a plan's items are signed as a whole when the plan is proposed, revised or decided: a hash
  chain over every item (id, position, logical id, key, digest, target, whether it needs
  approval), from the last item back to the first, so that each later checkpoint signs the
  chain's link at the next open item and a fixed size, whatever the plan's length. Carrying
  it forward recomputes the chain from the rows and compares;
- a grant is signed only when it was signed before or was marked; a plan's grant is signed
  once, in `open_plan`, for each of its items.

Any row that differs is refused before anything is signed (UnsignedRows): the service fails,
and a worker recording an outcome stops the run for a person instead (runs.execution).
"""

from __future__ import annotations

from control.foundation.canonical import (
    canonical_json,
    content_hash,
    idempotency_key,
    intent_digest,
)
from runs.exceptions import CheckpointError, UnsignedRows
from runs.models import OPEN_ACTION_STATUSES, TERMINAL_PHASES, Action, Checkpoint, Run
from runs.record.authored import is_authored
from runs.record.binding import INTENT_FIELDS
from runs.record.checkpoints import (
    approval_state,
    checkpoint_verify,
    checkpoints_write,
    pending_action_state,
    state_document,
)

PLAN_CHAIN_END = content_hash(b"")
PLAN_ENTRY_FIELDS = (
    "id",
    "position",
    "action_id",
    "idempotency_key",
    "intent_digest",
    "target",
    "needs_approval",
)


def checkpoint_write(run: Run) -> Checkpoint:
    """Signs the run's current state; call inside the transaction that changed it. A service
    that calls another service may reach the same version twice in one transaction: the
    later, fuller state replaces the earlier one before anything is committed."""
    (checkpoint,) = checkpoints_write([(run, build_state(run))])
    return checkpoint


def build_state(run: Run) -> dict:
    """The recoverable state of `run` as the checkpoint records it; UnsignedRows when an
    open intent or grant in the rows is not what the last verified checkpoint signed."""
    # Only the open intents: the cost of a checkpoint must not grow with the completed work,
    # nor with a plan's size: a running run needs only the next one (and the link of its
    # plan's chain), a stopped one only the identities of those in doubt.
    open_actions = run.actions.filter(status__in=OPEN_ACTION_STATUSES).order_by(
        "position", "created_at"
    )
    if run.phase in TERMINAL_PHASES:
        in_doubt = list(
            open_actions.values("action_id", "idempotency_key", "intent_digest", "status")
        )
        return state_document(run, pending=None, approval=None, in_doubt=in_doubt)
    pending = (
        open_actions.select_related("observation", "plan").prefetch_related("approvals").first()
    )
    if pending is None:
        return state_document(run, pending=None, approval=None, in_doubt=[])
    signed = previous_state(run)
    problems: list[str] = []
    intent = _carried_intent(signed, pending, problems)
    open_plan = _carried_plan(signed, pending, problems) if pending.plan_id else None
    approval = _carried_approval(signed, pending, open_plan, problems)
    if problems:
        raise UnsignedRows(problems)
    if open_plan is not None:
        open_plan["grant"] = _plan_grant(approval)
    return state_document(run, pending=intent, approval=approval, in_doubt=[], open_plan=open_plan)


def previous_state(run: Run) -> dict | None:
    """The run's latest checkpoint, verified (MAC, invariants, its own run); None for a run
    that has none yet. A checkpoint that does not verify cannot vouch for anything."""
    checkpoint = run.checkpoints.order_by("-state_version").first()
    if checkpoint is None:
        return None
    try:
        state = checkpoint_verify(checkpoint.body)
    except CheckpointError as error:
        raise UnsignedRows([f"the last checkpoint does not verify ({error})"]) from None
    if state["run_id"] != str(run.pk) or state["tenant_id"] != str(run.tenant_id):
        raise UnsignedRows(["the last checkpoint belongs to another run"])
    return state


def _carried_intent(signed: dict | None, action: Action, problems: list[str]) -> dict:
    """The pending intent as the rows hold it, once they are shown to be what was signed."""
    intent = pending_action_state(action)
    try:
        consistent = action.intent_digest == intent_digest(
            tool=action.tool, target=action.target, args=action.args
        ) and action.idempotency_key == idempotency_key(
            run_id=str(action.run_id),
            action_id=action.action_id,
            target=action.target,
            contract_version=action.contract_version,
        )
    except (TypeError, ValueError):
        consistent = False
    if not consistent:
        problems.append(f"{action.action_id}: its digest or key does not match its fields")
    before = (signed or {}).get("pending_action")
    if before is not None and before.get("id") == intent["id"]:
        if changed := _changed_fields(intent, before):
            problems.append(f"{action.action_id}: {', '.join(changed)} changed since signed")
    elif action.plan_id is None and not is_authored(action.pk):
        problems.append(f"{action.action_id} was never signed")
    return intent


def _changed_fields(rows: dict, signed: dict) -> list[str]:
    return [
        field
        for field in INTENT_FIELDS
        if canonical_json(rows.get(field)) != canonical_json(signed.get(field))
    ]


def plan_entry(action) -> dict:
    """One item of a plan as its signed chain holds it (an Action, or a row's values)."""
    get = action.get if isinstance(action, dict) else lambda field: getattr(action, field)
    entry = {field: get(field) for field in PLAN_ENTRY_FIELDS}
    entry["id"] = str(entry["id"])
    return entry


def plan_chain(entries: list[dict]) -> list[str]:
    """links[i] commits to entries[i:] (links[len] is the end): signing one link signs
    every item from there to the plan's last, in order."""
    links = [PLAN_CHAIN_END]
    for entry in reversed(entries):
        links.append(content_hash(canonical_json([entry, links[-1]])))
    links.reverse()
    return links


def _carried_plan(signed: dict | None, pending: Action, problems: list[str]) -> dict:
    """The link of the plan's chain at its next open item, proven from the previous one."""
    plan = pending.plan
    before = (signed or {}).get("open_plan")
    carried = before is not None and before.get("id") == str(plan.pk)
    start = before["from_position"] if carried else 0
    rows = list(
        plan.items.filter(position__gte=min(start, pending.position))
        .order_by("position")
        .values(*PLAN_ENTRY_FIELDS)
    )
    entries = [plan_entry(row) for row in rows]
    links = plan_chain(entries)
    at = {entry["id"]: index for index, entry in enumerate(entries)}
    if carried:
        if links[0] != before["items_hash"] or before["digest"] != plan.digest:
            problems.append(f"the plan's items differ from the {before['items']} signed")
    elif not is_authored(plan.pk):
        problems.append(f"plan {plan.pk} was never signed")
    index = at[str(pending.pk)]
    return {
        "id": str(plan.pk),
        "digest": before["digest"] if carried else plan.digest,
        "from_position": pending.position,
        "items": len(entries) - index,
        "items_hash": links[index],
        "grant": None,
    }


def _carried_approval(
    signed: dict | None, pending: Action, open_plan: dict | None, problems: list[str]
) -> dict | None:
    grants = [a for a in pending.approvals.all() if a.decision == "approve"]
    rows = approval_state(pending, grants)
    before = (signed or {}).get("pending_action")
    if before is not None and before.get("id") == str(pending.pk):
        expected = signed["approval"]
    else:
        expected = _item_approval(pending, (signed or {}).get("open_plan"), open_plan)
    if canonical_json(rows) == canonical_json(expected):
        return rows
    approvers = set((expected or {}).get("approvers", []))
    new = [grant for grant in grants if str(grant.approver_id) not in approvers]
    if not new or not all(is_authored(grant.pk) for grant in new):
        problems.append(
            f"{pending.action_id}: the grants in the rows are not the ones signed"
            f" ({_shown(rows)} in the rows, {_shown(expected)} signed)"
        )
    elif not approvers <= {str(grant.approver_id) for grant in grants}:
        problems.append(f"{pending.action_id}: a signed grant is missing from the rows")
    return rows


def _item_approval(pending: Action, before: dict | None, open_plan: dict | None) -> dict | None:
    """What a plan's signed grant says of its next item; a single intent's first checkpoint
    has none (its grants are marked when written)."""
    if open_plan is None or before is None or before.get("id") != open_plan["id"]:
        return None if pending.needs_approval else approval_state(pending, [])
    grant = before.get("grant")
    if grant is None:
        return None
    return {
        "decision": "approve",
        "intent_digest": pending.intent_digest,
        "state_version": grant["state_version"],
        "target_scope": pending.target,
        "expires_at": grant["expires_at"],
        "approvers": grant["approvers"],
    }


def _plan_grant(approval: dict | None) -> dict | None:
    if approval is None or approval.get("decision") != "approve":
        return None
    return {field: approval[field] for field in ("state_version", "expires_at", "approvers")}


def _shown(value) -> str:
    text = canonical_json(value).decode()
    return text if len(text) <= 200 else text[:197] + "..."
