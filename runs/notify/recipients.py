"""Who is told: the tenant's approvers with an address, or a tool policy's escalation
contacts; a row that does not verify tells nobody."""

from __future__ import annotations

from control.foundation.tenancy import APPROVER_ROLES, verified_memberships
from control.models import Membership
from runs.models import Action, ToolPolicy
from runs.record.signed_rows import POLICY_ROWS


def approvers_with_email(tenant) -> list[tuple[int, str]]:
    """Everyone who may decide in the tenant and has an address, once each, by address."""
    memberships = (
        Membership.objects.filter(tenant=tenant, role__in=APPROVER_ROLES, user__is_active=True)
        .exclude(user__email="")
        .select_related("user")
    )
    # A membership that does not verify makes nobody an approver, nor a recipient.
    verified, _ = verified_memberships(memberships)
    rows = {(row.user_id, row.user.email) for row in verified}
    return sorted(rows, key=lambda row: (row[1], row[0]))


def escalation_contacts(action: Action) -> list[str]:
    """The addresses the action's tool policy escalates to, as the policy says now; none
    when the row does not verify (a forged row must not mail requests to its own contacts)."""
    policy = ToolPolicy.objects.filter(tenant_id=action.tenant_id, tool=action.tool).first()
    if policy is None or not POLICY_ROWS.verifies(policy):
        return []
    return list(policy.escalation_contacts)
