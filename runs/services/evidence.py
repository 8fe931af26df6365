"""What each decision, execution and ending states in an intent's decision receipt
(runs.record.evidence appends and signs; runs.models.evidence says the kinds).

The decision services check the view the approver saw (`view_check`, before any write) and
state the decision with it (`decision_stated`), after the audit entry, which it names; a
rejection and an expiry end with `never_sent_stated`; the worker's receipt is
`executed_stated`. Each runs inside the caller's transaction.
"""

from __future__ import annotations

from control.models import AuditEntry
from runs.exceptions import GrantMismatch
from runs.models import Action, Plan, Receipt, Risk, Run, Statement
from runs.record.evidence import audit_place, statements_append
from runs.selectors.decision_views import decision_view, view_digest
from runs.services.deciding import Checked

Kind = Statement.Kind

# How a decider proved who they are, as a decision receipt says it.
SESSION = "session"  # signed in to the browser with a password
DECISION_LINK = "decision_link"  # a signed link sent to them, without a session
DECISION_LINK_IN_SESSION = "decision_link+session"
STANDING_RULE = "standing_rule"  # no one at the time: a rule people approved earlier


def view_check(checked: Checked, seen_view: str) -> dict:
    """The view of the checked request as it is now; GrantMismatch when the page said it
    showed another (`seen_view` is the digest its form carried; "" from a caller that
    renders no view, such as a service called directly)."""
    view = decision_view(checked.request, checked.items)
    if seen_view and seen_view != view_digest(view):
        raise GrantMismatch(
            "view", "what you saw is not what this request shows now; review it again"
        )
    return view


def decision_stated(checked: Checked, **statement) -> None:
    """A person's decision on the checked request (approval_decide, plan_decide)."""
    _decision_stated(
        checked.request, checked.items, run=checked.run, before=len(checked.granted), **statement
    )


def _decision_stated(
    request: Action | Plan,
    items: list[Action],
    *,
    run: Run,
    before: int,
    view: dict,
    seen_view: str,
    decision: str,
    decider: dict,
    reason: str,
    entry: AuditEntry,
    rule: dict | None = None,
    edited_from: dict | None = None,
) -> None:
    """One decision statement per item (a plan's items each state the whole plan's view),
    then, for a rejection, each item's never-sent statement. `edited_from` names the intent
    an edit-then-approve replaced and the view its editor saw."""
    content = {
        "decision": decision,
        "decider": decider,
        "view": view,
        "view_digest": view_digest(view),
        "view_seen": seen_view or None,
        "state_version": request.base_version,
        "plan_digest": request.digest if isinstance(request, Plan) else None,
        "policy": _policy(items[0], approvals_before=before, rule=rule),
        "reason": reason,
        "audit": audit_place(entry),
        "edited_from": edited_from,
    }
    statements_append([(item, Kind.DECISION, content) for item in items])
    if decision == "reject":
        never_sent_stated(items, run=run, status=Action.Status.REJECTED)


def rule_decision_stated(
    run: Run, action: Action, *, rule, approvers: list, entry: AuditEntry
) -> None:
    """A standing rule's approval: no one saw this intent; the rule's approvers saw the rule."""
    view = decision_view(action)
    _decision_stated(
        action,
        [action],
        run=run,
        before=0,
        view=view,
        seen_view="",
        decision="approve",
        decider={
            "kind": "rule",
            "name": f"standing rule {rule.name}",
            "authenticated": STANDING_RULE,
            "rule_approved_by": sorted(person.get_username() for person in approvers),
        },
        reason=entry.reason,
        entry=entry,
        rule={"id": str(rule.pk), "name": rule.name, "uses": rule.uses},
    )


def person(approver, via: str) -> dict:
    return {"kind": "person", "name": approver.get_username(), "authenticated": via}


def probe(actor: str) -> dict:
    """The reconciler's automatic probes, which settle a case on a receipt found by key."""
    return {"kind": "probe", "name": actor, "authenticated": "countersign"}


def never_sent_stated(items: list[Action], *, run: Run, status: str, detail: str = "") -> None:
    """Each item ended (`status`) with nothing applied: no attempt made, or only attempts
    proven not applied (`detail` says how), as of the run's current state version; and
    nothing will be sent, as the item can no longer be approved or tried again."""
    statements_append(
        [
            (
                item,
                Kind.NEVER_SENT,
                {
                    "status": status,
                    "last_state_version": run.state_version,
                    "attempts": item.attempt_count,
                    "detail": detail,
                },
            )
            for item in items
        ]
    )


def unreviewed_stated(action: Action) -> None:
    """A write whose tool's policy asks no approval, as it goes to a worker."""
    statements_append([(action, Kind.UNREVIEWED, {"policy": _policy(action, approvals_before=0)})])


def executed_stated(done: list[tuple[Action, Receipt]]) -> None:
    """Each action's receipt, as recorded (a worker's, a query's, or a reconciler's)."""
    statements_append(
        [
            (
                action,
                Kind.EXECUTED,
                {
                    "attempts": action.attempt_count,
                    "receipt": {
                        "receipt_id": receipt.receipt_id,
                        "intent_digest": receipt.intent_digest,
                        "idempotency_key": receipt.idempotency_key,
                        "status": receipt.status,
                        "target_version": receipt.target_version,
                        "raw_response_hash": receipt.raw_response_hash,
                        "source": receipt.source,
                    },
                },
            )
            for action, receipt in done
        ]
    )


def failed_stated(action: Action, *, error_class: str, detail: str) -> None:
    """The write failed for good: the external system refused it (each attempt provably not
    applied), its tool is gone, or a person gave up on it (`error_class` says which)."""
    content = {"attempts": action.attempt_count, "error_class": error_class, "detail": detail}
    statements_append([(action, Kind.FAILED, content)])


def uncertain_stated(action: Action, *, case_pk, reason: str, entry: AuditEntry) -> None:
    """The outcome is not known: a case opened for it, by the probes and then people."""
    content = {
        "case": str(case_pk),
        "reason": reason,
        "attempts": action.attempt_count,
        "audit": audit_place(entry),
    }
    statements_append([(action, Kind.UNCERTAIN, content)])


def resolved_stated(
    action: Action,
    *,
    case_pk,
    resolution: str,
    note: str,
    decider: dict,
    found: dict | None,
    entry: AuditEntry,
) -> None:
    """How the case ended, by whom, on what evidence (`found`: what the reconciler or the
    probes pointed at)."""
    content = {
        "case": str(case_pk),
        "resolution": resolution,
        "note": note,
        "decider": decider,
        "evidence": found,
        "audit": audit_place(entry),
    }
    statements_append([(action, Kind.RESOLVED, content)])


def _policy(action: Action, *, approvals_before: int, rule: dict | None = None) -> dict:
    """The approval rules in force for the intent, as frozen with it when proposed."""
    return {
        "needs_approval": action.needs_approval,
        "required_approvals": action.required_approvals,
        "four_eyes": action.four_eyes,
        "risk": Risk(action.risk).label,
        "contract_version": action.contract_version,
        "approvals_before": approvals_before,
        "standing_rule": rule,
    }
