"""Typed factories. State is reached through the real services, never by writing fields."""

from __future__ import annotations

import hashlib
import time
from itertools import count

from django.contrib.auth import get_user_model
from django.utils import timezone

from control.models import Tenant
from control.services import member_add, tenant_create
from runs.models import Action, Observation, Plan, Run, ToolPolicy
from runs.services import (
    PlanItem,
    action_propose,
    approval_decide,
    approval_expire,
    connectors_enable,
    observation_record,
    plan_decide,
    plan_propose,
    run_start,
    tool_policy_set,
)

_sequence = count(1)


def make_tenant(name: str | None = None, *, connectors: bool = True) -> Tenant:
    """A tenant; with `connectors`, every connector this process knows now is enabled for
    it, reads without approval, as a tenant that uses them is set up (a tool registered
    later is enabled by tests.registry.registered). Without: a new tenant as it really
    starts, reaching nothing."""
    tenant = tenant_create(name=name or f"tenant-{next(_sequence)}", actor="tests")
    if connectors:
        enable_connectors(tenant)
    return tenant


def enable_connectors(tenant: Tenant, *names: str, reads_without_approval: bool = True) -> None:
    """Enables the named connectors (none named: every one known) through the service."""
    connectors_enable(
        tenant=tenant,
        connectors=list(names) or None,
        actor="tests",
        reads_without_approval=reads_without_approval,
    )


def make_user(tenant: Tenant, *roles: str, username: str | None = None):
    username = username or f"user-{next(_sequence)}"
    for role in roles or ("operator",):
        member_add(
            tenant=tenant,
            username=username,
            role=role,
            actor="tests",
            password="a-long-test-password",
        )
    return get_user_model().objects.get(username=username)


def make_policy(tenant: Tenant, tool: str, **fields) -> ToolPolicy:
    """A tenant's policy for `tool`, written (and signed) by the service; unnamed fields keep
    the model's defaults. A row created around the service does not verify, so it would be
    read as the strictest policy (runs.selectors.policy_for)."""
    values = {
        "needs_approval": True,
        "four_eyes": False,
        "required_approvals": 1,
        "approval_seconds": 24 * 3600,
    }
    values.update(fields)
    return tool_policy_set(tenant=tenant, tool=tool, actor="tests", **values)


def make_run(tenant: Tenant, **fields) -> Run:
    fields.setdefault("goal", "close ticket-7 once the customer confirmed the fix")
    fields.setdefault("created_by", "agent-token")
    return run_start(tenant=tenant, **fields)


def make_observation(run: Run, *, summary: str = "customer confirmed the fix") -> Observation:
    return observation_record(
        run=run,
        source="ticket.lookup",
        ref="ticket-7",
        content_hash="sha256:" + hashlib.sha256(summary.encode()).hexdigest(),
        summary=summary,
        actor="agent-token",
    )


def make_action(
    run: Run,
    *,
    action_id: str = "close-ticket",
    target: str = "ticket-7",
    args: dict | None = None,
    tool: str = "ticket.close",
    observation: Observation | None = None,
    **fields,
) -> Action:
    run.refresh_from_db()
    observation = observation or make_observation(run)
    action, _ = action_propose(
        run=run,
        action_id=action_id,
        tool=tool,
        target=target,
        args=args if args is not None else {"resolution": "fixed"},
        contract_version=fields.pop("contract_version", "v1"),
        observation=observation,
        proposed_by=fields.pop("proposed_by", "agent-token"),
        **fields,
    )
    return action


def approved_action(tool: str, *, target: str, args: dict, action_id: str, goal: str) -> Action:
    """An intent of a new tenant's new run, approved by an operator of that tenant."""
    tenant = make_tenant()
    action = make_action(
        make_run(tenant, goal=goal), action_id=action_id, tool=tool, target=target, args=args
    )
    approve(action, make_user(tenant, "operator"))
    return action


def approve(action: Action, approver, *, reason: str = "") -> None:
    decide(action, approver, decision="approve", reason=reason)


def reject(action: Action, approver, *, reason: str) -> None:
    decide(action, approver, decision="reject", reason=reason)


def expire(action: Action) -> None:
    """Nobody decided in time: waits out the approval window (make it short first with a
    ToolPolicy's approval_seconds) and runs the sweep's step that marks it expired."""
    action.refresh_from_db()
    remaining = (action.expires_at - timezone.now()).total_seconds()
    assert remaining < 5, "give the tool a short approval window (approval_seconds) first"
    time.sleep(max(remaining, 0) + 0.2)
    assert approval_expire(action=action)


def decide(action: Action, approver, *, decision: str, reason: str = "") -> None:
    """approver's decision on the intent as it stands, bound to what they saw."""
    action.refresh_from_db()
    action.run.refresh_from_db()
    approval_decide(
        action=action,
        approver=approver,
        decision=decision,
        seen_digest=action.intent_digest,
        seen_state_version=action.base_version,
        reason=reason,
    )
    action.refresh_from_db()


def approve_plan(plan, approver) -> None:
    """approver's approval of the plan as they saw it (its digest and base version)."""
    plan_decide(
        plan=plan,
        approver=approver,
        decision="approve",
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
    )


def set_policy(tenant: Tenant, tool: str, **changes) -> None:
    """The tenant's policy for `tool` through the admin's service: approval by one person
    within an hour, unless `changes` say otherwise."""
    values = {
        "needs_approval": True,
        "four_eyes": False,
        "required_approvals": 1,
        "approval_seconds": 3600,
        "actor": "tests",
    }
    tool_policy_set(tenant=tenant, tool=tool, **{**values, **changes})


def make_notify_plan(tenant: Tenant, *, goal: str, bodies: dict[str, str]) -> Plan:
    """A plan of notify.send intents, one per recipient with its body (`tell-1`, `tell-2`,
    ... in order), proposed by the agent on a new run."""
    run = make_run(tenant, goal=goal)
    items = [
        PlanItem(
            action_id=f"tell-{number}", tool="notify.send", target=recipient, args={"body": body}
        )
        for number, (recipient, body) in enumerate(bodies.items(), start=1)
    ]
    plan, _ = plan_propose(
        run=run, items=items, observation=make_observation(run), proposed_by="agent-token"
    )
    return plan
