"""The rows of runs that decide approval or reach, and the fields their MACs cover
(control.foundation.row_signing).

A tool policy decides whether an intent waits for a person and how many; a standing rule
approves intents by itself, so its limits, its approvers and its use counters are all signed
(a counter reset by hand would give a spent rule new uses). The services re-sign a row in the
transaction that changes it; every read that decides verifies it.
"""

from __future__ import annotations

from control.foundation.row_signing import SignedRows, decimal_text, time_text

POLICY_ROWS = SignedRows(
    "tool_policy",
    "runs.ToolPolicy",
    lambda row: {
        "tool": row.tool,
        "needs_approval": row.needs_approval,
        "four_eyes": row.four_eyes,
        "required_approvals": row.required_approvals,
        "approval_seconds": row.approval_seconds,
        "standing_grants_allowed": row.standing_grants_allowed,
        "escalation_seconds": row.escalation_seconds,
        "escalation_contacts": row.escalation_contacts,
        "link_only_decisions": row.link_only_decisions,
        # Signed once set; a row from before the field signed without it and still verifies.
        **({"risk": row.risk} if row.risk is not None else {}),
    },
)

RULE_ROWS = SignedRows(
    "standing_grant",
    "runs.StandingGrant",
    lambda row: {
        "tool": row.tool,
        "name": row.name,
        "target_pattern": row.target_pattern,
        "arg_bounds": row.arg_bounds,
        "max_uses": row.max_uses,
        "uses_per_hour": row.uses_per_hour,
        "amount_argument": row.amount_argument,
        "amount_cap": decimal_text(row.amount_cap),
        "expires_at": time_text(row.expires_at),
        "status": row.status,
        "required_approvals": row.required_approvals,
        "four_eyes": row.four_eyes,
        "created_by": row.created_by_id,
        "uses": row.uses,
        "amount_used": decimal_text(row.amount_used),
        # Who approved the rule decides whose grants it makes: a StandingGrantApproval row
        # inserted by hand would otherwise add an approver to an active rule.
        "approvers": sorted(approval.approver_id for approval in row.approvals.all()),
    },
    related=("approvals",),
)

# Which external systems a tenant reaches, and whether its reads need a person: a row inserted
# by hand would open a connector, or let its reads run without approval.
ENABLEMENT_ROWS = SignedRows(
    "connector_enablement",
    "runs.ConnectorEnablement",
    lambda row: {
        "connector": row.connector,
        "reads_without_approval": row.reads_without_approval,
    },
)
