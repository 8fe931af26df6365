"""Tool policies: a tenant's approval rules per tool (reads live in runs.selectors.policy_for)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from control.foundation.audit import audit_record
from control.models import Tenant
from runs.exceptions import (
    InvalidArguments,
)
from runs.models import (
    Risk,
    ToolPolicy,
)
from runs.record.signed_rows import POLICY_ROWS
from runs.tools import errors as tool_errors
from runs.tools.registry import get_tool


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
    standing_grants_allowed: bool = True,
    escalation_seconds: int | None = None,
    escalation_contacts: list[str] | None = None,
    link_only_decisions: bool = False,
    risk: int | None = None,
) -> ToolPolicy:
    """Sets a tenant's approval policy for one tool; intents proposed from now on follow it
    (those already frozen keep the policy they were proposed under). The escalation and
    link-only settings are read when used, so they also reach requests already waiting."""
    try:
        get_tool(tool)
    except tool_errors.ToolError as error:
        raise InvalidArguments(str(error)) from None
    if risk is not None and risk not in Risk.values:
        raise InvalidArguments(f"risk must be one of {', '.join(Risk.labels)}, or unset")
    contacts = list(escalation_contacts or [])
    if (escalation_seconds is None) != (not contacts):
        raise InvalidArguments("an escalation needs both a time and at least one contact")
    if escalation_seconds is not None and escalation_seconds < 1:
        raise InvalidArguments("the escalation time must be at least one second")
    for address in contacts:
        try:
            validate_email(address)
        except ValidationError:
            raise InvalidArguments(f"{address!r} is not an email address") from None
    values = {
        "needs_approval": needs_approval,
        "four_eyes": four_eyes,
        "required_approvals": required_approvals,
        "approval_seconds": approval_seconds,
        "standing_grants_allowed": standing_grants_allowed,
        "escalation_seconds": escalation_seconds,
        "escalation_contacts": contacts,
        "link_only_decisions": link_only_decisions,
        "risk": risk,
    }
    policy, _ = ToolPolicy.objects.update_or_create(tenant=tenant, tool=tool, defaults=values)
    # Only rows signed here decide (runs.selectors.policy_for); saving a policy again is also
    # how an admin replaces a row that no longer verifies.
    POLICY_ROWS.seal(policy)
    audit_record(
        actor=actor,
        verb="tool_policy.set",
        tenant=tenant,
        object_type="tool_policy",
        object_id=tool,
        data=values,
    )
    return policy
