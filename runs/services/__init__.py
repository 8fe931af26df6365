"""Every state change of a run, an intent, a grant or a lease happens here.

Each service runs in one transaction that changes the state with compare-and-set, appends
its event (runs.record.events), writes the signed checkpoint and, where work follows, an outbox
message. Views, the API, jobs and commands call these and never write status fields.
One module per family; callers import from this package.
"""

from __future__ import annotations

from runs.action_ids import COMPENSATION_PREFIX
from runs.services.approvals import (
    approval_decide,
    approval_expire,
    approval_warn_expiring,
    grant_check,
    grant_problem,
    own_events_since_proposal,
)
from runs.services.common import action_set_status, outbox_write, refuse_plan_item, without
from runs.services.connectors import connectors_disable, connectors_enable
from runs.services.deciding import run_unchanged_since_proposal
from runs.services.intents import (
    action_ask_again,
    action_edit_and_approve,
    action_propose,
)
from runs.services.leases import (
    lease_claim,
    lease_release,
    lease_renew,
    leases_claim,
    leases_held,
    leases_left,
    leases_release,
)
from runs.services.ledger import evidence_export, ledger_export_record
from runs.services.moves import run_move_out, run_restore
from runs.services.outreach import (
    approval_escalate,
    decide_by_link,
    link_only_allowed,
)
from runs.services.plans import (
    PlanItem,
    plan_decide,
    plan_expire,
    plan_propose,
    plan_revise,
)
from runs.services.policies import tool_policy_set
from runs.services.runs import (
    checkpoint_or_stop,
    limit_reached,
    observation_record,
    run_cancel,
    run_complete,
    run_end_idle,
    run_enforce_limits,
    run_recover,
    run_start,
    run_stop,
    run_stop_unsigned,
)
from runs.services.standing import (
    standing_grant_approve,
    standing_grant_propose,
    standing_grant_revoke,
)

__all__ = [
    "COMPENSATION_PREFIX",
    "PlanItem",
    "action_ask_again",
    "action_edit_and_approve",
    "action_propose",
    "action_set_status",
    "approval_decide",
    "approval_escalate",
    "approval_expire",
    "approval_warn_expiring",
    "checkpoint_or_stop",
    "connectors_disable",
    "connectors_enable",
    "decide_by_link",
    "evidence_export",
    "grant_check",
    "grant_problem",
    "lease_claim",
    "lease_release",
    "lease_renew",
    "leases_claim",
    "leases_held",
    "leases_left",
    "leases_release",
    "ledger_export_record",
    "limit_reached",
    "link_only_allowed",
    "observation_record",
    "outbox_write",
    "own_events_since_proposal",
    "plan_decide",
    "plan_expire",
    "plan_propose",
    "plan_revise",
    "refuse_plan_item",
    "run_cancel",
    "run_complete",
    "run_end_idle",
    "run_enforce_limits",
    "run_move_out",
    "run_recover",
    "run_restore",
    "run_start",
    "run_stop",
    "run_stop_unsigned",
    "run_unchanged_since_proposal",
    "standing_grant_approve",
    "standing_grant_propose",
    "standing_grant_revoke",
    "tool_policy_set",
    "without",
]
