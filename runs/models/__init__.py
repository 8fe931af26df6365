"""Runs and their side effects: events, checkpoints, frozen intents, grants, leases, receipts.

Status fields change only through runs.services; frozen rows (events, intents' identifying
fields, receipts, checkpoints) are insert-only; events and receipts are so in the database
itself (a trigger refuses UPDATE and DELETE: migration 0002).
"""

from __future__ import annotations

from runs.models.connectors import ConnectorEnablement
from runs.models.evidence import Statement
from runs.models.gateway import McpAgent, McpAgentRun, McpSession
from runs.models.grants import StandingGrant, StandingGrantApproval
from runs.models.intents import (
    OPEN_ACTION_STATUSES,
    Action,
    Approval,
    Attempt,
    OutboxMessage,
    Receipt,
    Risk,
    ToolDefinition,
    ToolPolicy,
)
from runs.models.outreach import DecisionLinkUse, Escalation
from runs.models.plans import Plan
from runs.models.runs import TERMINAL_PHASES, Checkpoint, Lease, Observation, Run, RunEvent

__all__ = [
    "OPEN_ACTION_STATUSES",
    "TERMINAL_PHASES",
    "Action",
    "Approval",
    "Attempt",
    "Checkpoint",
    "ConnectorEnablement",
    "DecisionLinkUse",
    "Escalation",
    "Lease",
    "McpAgent",
    "McpAgentRun",
    "McpSession",
    "Observation",
    "OutboxMessage",
    "Plan",
    "Receipt",
    "Risk",
    "Run",
    "RunEvent",
    "StandingGrant",
    "StandingGrantApproval",
    "Statement",
    "ToolDefinition",
    "ToolPolicy",
]
