"""Tool policies: a tenant's approval rules per tool (reads live in runs.selectors.policy_for)."""

from __future__ import annotations

from django.db import transaction

from control.audit import audit_record
from control.models import Tenant
from runs.exceptions import (
    InvalidArguments,
)
from runs.models import (
    ToolPolicy,
)
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
        "standing_grants_allowed": standing_grants_allowed,
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
