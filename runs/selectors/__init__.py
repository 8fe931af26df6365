"""Every read of runs and their parts; each owns its joins so callers never trigger N+1.

`core` (what services and workers share), `pages` (the operator pages), `ledger` (the
receipts ledger). Callers import from `runs.selectors`.
"""

from __future__ import annotations

from runs.selectors.core import (
    Policy,
    action_status,
    action_with_decisions,
    approval_overrides,
    completed_action_ids,
    due_action_filter,
    latest_case,
    observation_of_run,
    policy_for,
    run_by_id,
    run_effects_report,
    runs_newest_first,
    tool_catalog,
)
from runs.selectors.ledger import (
    LEDGER_PAGE_SIZE,
    PROVEN_STATUSES,
    LedgerPage,
    ledger_page,
    ledger_rows,
)
from runs.selectors.pages import (
    CHECKPOINTS_SHOWN,
    EVENTS_PAGE_SIZE,
    EXPIRED_SHOWN,
    PAGE_SIZE,
    InboxFilters,
    Page,
    RunDetail,
    RunFilters,
    action_by_id,
    actions_by_ids,
    inbox_expired,
    inbox_page,
    inbox_proposers,
    inbox_waiting_count,
    run_detail,
    run_page,
    tool_policies,
)

__all__ = [
    "CHECKPOINTS_SHOWN",
    "EVENTS_PAGE_SIZE",
    "EXPIRED_SHOWN",
    "LEDGER_PAGE_SIZE",
    "PAGE_SIZE",
    "PROVEN_STATUSES",
    "InboxFilters",
    "LedgerPage",
    "Page",
    "Policy",
    "RunDetail",
    "RunFilters",
    "action_by_id",
    "action_status",
    "action_with_decisions",
    "actions_by_ids",
    "approval_overrides",
    "completed_action_ids",
    "due_action_filter",
    "inbox_expired",
    "inbox_page",
    "inbox_proposers",
    "inbox_waiting_count",
    "latest_case",
    "ledger_page",
    "ledger_rows",
    "observation_of_run",
    "policy_for",
    "run_by_id",
    "run_detail",
    "run_effects_report",
    "run_page",
    "runs_newest_first",
    "tool_catalog",
    "tool_policies",
]
