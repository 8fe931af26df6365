"""The API's JSON shapes as TypedDicts (see /api/v1/openapi.json for the full schema)."""

from __future__ import annotations

from typing import Any, TypedDict


class Budget(TypedDict):
    limit: int | None
    used: int


class Completed(TypedDict):
    count: int
    digest: str


class Run(TypedDict):
    id: str
    goal: str
    phase: str
    state_version: int
    last_event_seq: int
    plan: dict[str, Any]
    completed_work: list[Any]
    completed: Completed
    pending_work: list[Any]
    budget: Budget
    deadline: str | None
    versions: dict[str, Any]
    next_eligible_at: str | None
    retry_count: int
    stop_reason: str
    evidence: dict[str, Any] | None
    created_by: str
    created_at: str
    updated_at: str


class RunPage(TypedDict):
    items: list[Run]
    count: int
    limit: int
    offset: int
    next: str | None


class Tool(TypedDict):
    name: str
    contract_version: str
    needs_approval: bool
    dedupes_by_key: bool
    queryable_by_key: bool
    effect_class: str
    compensation: str | None
    echoes_digest: bool
    connector: str
    kind: str
    description: str
    capabilities: list[str]
    target_schema: dict[str, Any]
    args_schema: dict[str, Any]


class ObservationRecord(TypedDict):
    id: str
    run_id: str
    source: str
    ref: str
    content_hash: str
    summary: str
    created_at: str


class Approval(TypedDict):
    decision: str
    approver: str  # an opaque id, stable within the tenant; never the username
    reason: str
    created_at: str


class Decision(TypedDict):
    outcome: str  # approve, reject or not_required
    reason: str
    decided_at: str | None
    approvals: list[Approval]


class Receipt(TypedDict):
    receipt_id: str
    status: str
    target_version: int | None
    idempotency_key: str
    intent_digest: str
    raw_response_hash: str
    source: str
    created_at: str


class ReconciliationCase(TypedDict):
    id: str
    status: str
    reason: str
    url: str


class ActionRef(TypedDict):
    id: str
    action_id: str


class Action(TypedDict):
    id: str
    run_id: str
    action_id: str
    tool: str
    target: str
    args: dict[str, Any]
    contract_version: str
    idempotency_key: str
    intent_digest: str
    observation_id: str | None
    status: str
    needs_approval: bool
    required_approvals: int
    expires_at: str | None
    attempt_count: int
    next_attempt_at: str | None
    error_class: str | None
    last_error: str | None
    decision: Decision | None
    receipt: Receipt | None
    reconciliation_case: ReconciliationCase | None
    supersedes: ActionRef | None
    superseded_by: ActionRef | None
    created_at: str
    updated_at: str


class Plan(TypedDict):
    id: str
    run_id: str
    digest: str
    status: str
    size: int
    required_approvals: int
    expires_at: str
    decision_reason: str
    intents: list[Action]


class Effect(TypedDict, total=False):
    action_id: str
    tool: str
    target: str
    idempotency_key: str
    status: str
    receipt_id: str | None


class EffectsReport(TypedDict):
    done: list[Effect]
    in_doubt: list[Effect]
    not_started: list[Effect]


class CancelReport(TypedDict):
    run: Run
    report: EffectsReport
