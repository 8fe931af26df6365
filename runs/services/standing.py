"""Standing grants: rules that approve future intents of one tool within declared limits.

A rule is proposed by an operator and becomes active once the tool policy's approvers have
approved it (four eyes: never its proposer alone). At proposal time, before the transaction
that freezes an intent, the active rules of the tool are matched against it without any lock
(patterns run in linear time: runs.patterns, and a pattern outside that subset is refused
when the rule is written). In the transaction, only the rules that matched are locked, and
the first that still admits the intent approves it: one grant per rule approver, bound like
any grant (digest, state version, scope, expiry) and naming the rule. Every limit (uses,
uses per hour, the cumulative amount) is checked and counted under that lock, so concurrent
proposals cannot pass a cap together. A revoked or expired rule admits nothing from that
moment on.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import Prefetch
from django.db.models.functions import Now

from control.foundation.audit import audit_record
from control.foundation.clock import db_now
from control.foundation.tenancy import APPROVER_ROLES, has_any_role
from control.models import Tenant
from runs.exceptions import InvalidArguments, InvalidTransition, NotAllowed
from runs.models import Action, Approval, Run, StandingGrant, StandingGrantApproval
from runs.patterns import PatternRefused, safe_pattern
from runs.record.authored import authored
from runs.record.events import append_event
from runs.record.outbox import EXECUTE_JOB
from runs.record.payloads import action_approved
from runs.record.signed_rows import RULE_ROWS
from runs.selectors import policy_for
from runs.services import evidence
from runs.services.common import action_set_status, outbox_write, refuse_plan_item
from runs.tools import errors as tool_errors
from runs.tools.registry import get_tool

logger = logging.getLogger(__name__)
Rule = StandingGrant.Status
BOUND_KEYS = frozenset({"minimum", "maximum", "enum", "pattern"})
NUMBER_TYPES = ("number", "integer")


@transaction.atomic
def standing_grant_propose(
    *,
    tenant: Tenant,
    tool: str,
    name: str,
    proposer,
    expires_at: datetime,
    target_pattern: str = "",
    arg_bounds: dict | None = None,
    max_uses: int | None = None,
    uses_per_hour: int | None = None,
    amount_argument: str = "",
    amount_cap: Decimal | None = None,
) -> StandingGrant:
    """A new rule, waiting for the tool policy's approvers (the proposer's own approval
    counts unless the policy asks for four eyes)."""
    if not has_any_role(proposer, tenant, APPROVER_ROLES):
        raise NotAllowed("only an operator of this tenant may propose a standing rule")
    policy = policy_for(tenant=tenant, tool=tool)
    schema = _args_schema(tool)
    if not policy.needs_approval:
        raise InvalidArguments(f"{tool} needs no approval here: a rule would change nothing")
    if not policy.standing_grants_allowed:
        raise NotAllowed(f"the {tool} policy allows no standing rules: a person decides each")
    if not name.strip():
        raise InvalidArguments("name the rule: approvers and auditors read it")
    if expires_at <= db_now():
        raise InvalidArguments("expires_at is already past")
    _check_limits(max_uses=max_uses, uses_per_hour=uses_per_hour)
    _check_pattern("target_pattern", target_pattern)
    bounds = _checked_bounds(arg_bounds or {}, schema)
    _check_amount(amount_argument, amount_cap, schema)
    rule = StandingGrant.objects.create(
        tenant=tenant,
        tool=tool,
        name=name.strip(),
        target_pattern=target_pattern,
        arg_bounds=bounds,
        max_uses=max_uses,
        uses_per_hour=uses_per_hour,
        amount_argument=amount_argument,
        amount_cap=amount_cap,
        expires_at=expires_at,
        required_approvals=policy.required_approvals,
        four_eyes=policy.four_eyes,
        created_by=proposer,
    )
    RULE_ROWS.seal(rule)
    _audit(rule, proposer, "standing_grant.propose")
    if not rule.four_eyes:
        _approve(rule, proposer)
    return rule


@transaction.atomic
def standing_grant_approve(*, rule: StandingGrant, approver) -> StandingGrant:
    rule = StandingGrant.objects.select_for_update().get(pk=rule.pk)
    if rule.status != Rule.PROPOSED:
        raise InvalidTransition(f"the rule is {rule.status}, not waiting for approval")
    problem = RULE_ROWS.problem(rule)
    if problem:
        # Approving would sign it: a row written around the services is never vouched for.
        raise NotAllowed(
            f"the rule {rule.name!r} does not verify ({problem}): it was not written by "
            "Countersign; revoke it and propose it again"
        )
    if not has_any_role(approver, rule.tenant, APPROVER_ROLES):
        raise NotAllowed("only an operator of this tenant may approve a standing rule")
    if rule.four_eyes and approver.pk == rule.created_by_id:
        raise NotAllowed("four eyes: the proposer cannot approve their own rule")
    if rule.approvals.filter(approver=approver).exists():
        raise InvalidTransition("already approved by you; another operator must add theirs")
    _approve(rule, approver)
    return rule


@transaction.atomic
def standing_grant_revoke(*, rule: StandingGrant, actor, reason: str) -> StandingGrant:
    """Stops the rule at once: the next proposal is not admitted by it."""
    rule = StandingGrant.objects.select_for_update().get(pk=rule.pk)
    if not has_any_role(actor, rule.tenant, APPROVER_ROLES):
        raise NotAllowed("only an operator of this tenant may revoke a standing rule")
    if rule.status == Rule.REVOKED:
        raise InvalidTransition("the rule is already revoked")
    if not reason.strip():
        raise InvalidArguments("say why the rule is revoked")
    rule.status = Rule.REVOKED
    rule.revoked_by, rule.revoked_at, rule.revoke_reason = actor, db_now(), reason.strip()
    rule.save(update_fields=["status", "revoked_by", "revoked_at", "revoke_reason"])
    RULE_ROWS.seal(rule)  # a revoked rule admits nothing, verified or not
    _audit(rule, actor, "standing_grant.revoke", reason=reason)
    return rule


@dataclass(frozen=True)
class RuleMatch:
    """A rule whose target pattern and argument bounds admitted an intent, as they read
    when it was matched (outside any lock)."""

    pk: uuid.UUID
    target_pattern: str
    arg_bounds: dict


def standing_rules_matching(
    *, tenant_id, tool: str, target: str, args: dict[str, Any]
) -> list[RuleMatch]:
    """Before the proposal's transaction, holding no lock: the active rules of `tool` whose
    target pattern and argument bounds admit the intent. This is the part whose cost grows
    with the patterns and the agent's data (linear: runs.patterns); the limits are counted
    later, under each rule's row lock (standing_grant_apply)."""
    rules = (
        StandingGrant.objects.filter(
            tenant_id=tenant_id, tool=tool, status=Rule.ACTIVE, expires_at__gt=Now()
        )
        .order_by("created_at", "pk")
        .values_list("pk", "target_pattern", "arg_bounds")
    )
    return [
        RuleMatch(pk, pattern, bounds)
        for pk, pattern, bounds in rules
        if _matches(pk, pattern, bounds, target=target, args=args)
    ]


def standing_grant_apply(
    run: Run, action: Action, *, allowed: bool, matches: list[RuleMatch]
) -> StandingGrant | None:
    """In the transaction that froze `action`: approves it by the first of the rules that
    matched it (standing_rules_matching) that still admits it now, counting the use; None
    when none does (a person decides). Only those rules are locked, and under the lock only
    cheap checks run: the rule is still active and unexpired, reads as it was matched, and
    its limits and approvers allow one more use. A rule whose row does not verify (its
    limits, approvers or counters written around these services) admits nothing. A rule
    never approves a plan's item: the plan is decided as a whole, by people."""
    refuse_plan_item(action)
    if not action.needs_approval or not allowed or not matches:
        return None
    now = db_now()
    matched = {match.pk: match for match in matches}
    rules = (
        StandingGrant.objects.select_for_update()
        .filter(pk__in=list(matched), status=Rule.ACTIVE, expires_at__gt=now)
        .prefetch_related(
            Prefetch("approvals", queryset=StandingGrantApproval.objects.select_related("approver"))
        )
        .order_by("created_at", "pk")
    )
    for rule in rules:
        seen = matched[rule.pk]
        if (rule.target_pattern, rule.arg_bounds) != (seen.target_pattern, seen.arg_bounds):
            continue
        if not RULE_ROWS.verifies(rule):
            continue
        approvers = [a.approver for a in rule.approvals.all()]
        amount = _admits(rule, action, approvers, now)
        if amount is not None:
            _grant(run, action, rule, approvers, amount, now)
            return rule
    return None


def _matches(pk, pattern: str, bounds: dict, *, target: str, args: dict[str, Any]) -> bool:
    """Does the intent keep the rule's target pattern and argument bounds? A stored pattern
    outside the linear-time subset (written before it was required) admits nothing, and
    says so in the log: a person decides instead."""
    try:
        if pattern and not safe_pattern(pattern).fullmatch(target):
            return False
        return all(_within(bound, args.get(name)) for name, bound in bounds.items())
    except PatternRefused as refused:
        logger.error("standing rule %s admits nothing: its pattern is refused: %s", pk, refused)
        return False


def _admits(rule: StandingGrant, action: Action, approvers: list, now) -> Decimal | None:
    """The amount this use adds (0 without a cap) when `rule`'s limits and approvers allow
    one more use of it for `action` now, else None. Its patterns matched already."""
    if rule.max_uses is not None and rule.uses >= rule.max_uses:
        return None
    if rule.uses_per_hour is not None:
        recent = rule.grants.filter(created_at__gt=now - timedelta(hours=1))
        if recent.values("action").distinct().count() >= rule.uses_per_hour:
            return None
    # The rule's approvers must still be approvers, enough of them for the intent's policy,
    # and none may be the intent's proposer where four eyes apply.
    if len(approvers) < action.required_approvals or not all(
        has_any_role(person, rule.tenant, APPROVER_ROLES) for person in approvers
    ):
        return None
    if action.four_eyes and any(p.pk == action.proposed_by_user_id for p in approvers):
        return None
    if not rule.amount_argument:
        return Decimal(0)
    amount = _number(action.args.get(rule.amount_argument))
    if amount is None or amount < 0 or rule.amount_used + amount > rule.amount_cap:
        return None
    return amount


def _grant(run, action, rule: StandingGrant, approvers: list, amount: Decimal, now) -> None:
    grants = Approval.objects.bulk_create(
        Approval(
            tenant_id=action.tenant_id,
            action=action,
            decision=Approval.Decision.APPROVE,
            approver=person,
            reason=f"standing rule: {rule.name}",
            intent_digest=action.intent_digest,
            state_version=action.base_version,
            target_scope=action.target,
            expires_at=action.expires_at,
            created_at=now,
            rule=rule,
        )
        for person in approvers
    )
    authored(grant.pk for grant in grants)
    rule.uses += 1
    rule.amount_used += amount
    rule.last_used_at = now
    rule.save(update_fields=["uses", "amount_used", "last_used_at"])
    RULE_ROWS.seal(rule)
    action_set_status(
        action,
        expected={Action.Status.WAITING_APPROVAL},
        status=Action.Status.APPROVED,
        next_attempt_at=now,
    )
    append_event(
        run,
        actor=f"rule:{rule.pk}",
        action=action,
        **action_approved(approvals=len(approvers), rule={"id": str(rule.pk), "name": rule.name}),
    )
    outbox_write(run, job=EXECUTE_JOB, action=action)
    entry = audit_record(
        actor=f"rule:{rule.pk}",
        verb="action.approve",
        tenant=run.tenant,
        object_type="action",
        object_id=str(action.pk),
        reason=f"standing rule: {rule.name}",
        data={"intent_digest": action.intent_digest, "rule": str(rule.pk), "amount": str(amount)},
    )
    evidence.rule_decision_stated(run, action, rule=rule, approvers=approvers, entry=entry)


def _approve(rule: StandingGrant, approver) -> None:
    StandingGrantApproval.objects.create(grant=rule, approver=approver)
    if rule.approvals.count() >= rule.required_approvals:
        rule.status = Rule.ACTIVE
        rule.save(update_fields=["status"])
    RULE_ROWS.seal(rule)
    _audit(rule, approver, "standing_grant.approve")


def _audit(rule: StandingGrant, actor, verb: str, reason: str = "") -> None:
    audit_record(
        actor=actor.get_username(),
        verb=verb,
        tenant=rule.tenant,
        object_type="standing_grant",
        object_id=str(rule.pk),
        reason=reason,
        data={
            "tool": rule.tool,
            "name": rule.name,
            "target_pattern": rule.target_pattern,
            "arg_bounds": rule.arg_bounds,
            "max_uses": rule.max_uses,
            "uses_per_hour": rule.uses_per_hour,
            "amount_argument": rule.amount_argument,
            "amount_cap": str(rule.amount_cap) if rule.amount_cap is not None else None,
            "expires_at": rule.expires_at.isoformat(),
            "status": rule.status,
        },
    )


# Reading a rule's limits: each refusal names the field.


def _args_schema(tool: str) -> dict[str, Any]:
    try:
        return get_tool(tool).args_schema
    except tool_errors.ToolError as error:
        raise InvalidArguments(str(error)) from None


def _check_limits(*, max_uses: int | None, uses_per_hour: int | None) -> None:
    for field, value in (("max_uses", max_uses), ("uses_per_hour", uses_per_hour)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArguments(f"{field} must be a whole number")
        if value is not None and value < 1:
            raise InvalidArguments(f"{field} must be at least 1")


def _check_pattern(field: str, pattern: Any) -> None:
    if not isinstance(pattern, str):
        raise InvalidArguments(f"{field} must be a regular expression")
    try:
        safe_pattern(pattern)
    except PatternRefused as refused:
        raise InvalidArguments(f"{field} {refused}") from None


def _checked_bounds(bounds: Any, schema: dict[str, Any]) -> dict[str, dict]:
    if not isinstance(bounds, dict):
        raise InvalidArguments("arg_bounds must be an object of argument names")
    properties = schema.get("properties", {})
    for name, bound in bounds.items():
        where = f"arg_bounds.{name}"
        if name not in properties:
            raise InvalidArguments(f"{where}: the tool has no argument {name!r}")
        if not isinstance(bound, dict) or not bound or set(bound) - BOUND_KEYS:
            raise InvalidArguments(f"{where} takes minimum, maximum, enum and pattern only")
        for key in ("minimum", "maximum"):
            if key in bound and _number(bound[key]) is None:
                raise InvalidArguments(f"{where}.{key} must be a number")
        if "enum" in bound and (not isinstance(bound["enum"], list) or not bound["enum"]):
            raise InvalidArguments(f"{where}.enum must be a non-empty list of values")
        if "pattern" in bound:
            _check_pattern(f"{where}.pattern", bound["pattern"])
    return bounds


def _check_amount(argument: str, cap: Decimal | None, schema: dict[str, Any]) -> None:
    if not argument and cap is None:
        return
    if not argument or cap is None:
        raise InvalidArguments("a cumulative cap needs both amount_argument and amount_cap")
    declared = schema.get("properties", {}).get(argument)
    if declared is None or declared.get("type") not in NUMBER_TYPES:
        raise InvalidArguments(f"amount_argument: {argument!r} is not a numeric argument")
    if cap <= 0:
        raise InvalidArguments("amount_cap must be above zero")


def _within(bounds: dict, value: Any) -> bool:
    """Does an argument's value keep its bounds? An absent value never does."""
    if value is None:
        return False
    if "enum" in bounds and value not in bounds["enum"]:
        return False
    if "pattern" in bounds and not (
        isinstance(value, str) and safe_pattern(bounds["pattern"]).fullmatch(value)
    ):
        return False
    number = _number(value) if {"minimum", "maximum"} & set(bounds) else None
    if {"minimum", "maximum"} & set(bounds) and number is None:
        return False
    if "minimum" in bounds and number < _number(bounds["minimum"]):
        return False
    return not ("maximum" in bounds and number > _number(bounds["maximum"]))


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None
