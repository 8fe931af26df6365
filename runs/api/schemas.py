"""Request and response shapes of the runs API (control.api mounts it under /api/v1); the
fields an MCP call shares with it are runs.agent_fields."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import (
    AwareDatetime,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
)

from runs import limits
from runs.agent_fields import (
    ActionId,
    Body,
    ContractVersion,
    Digest,
    ProposalBody,
    Target,
    ToolName,
)
from runs.models import Action, Run

MAX_WAIT_SECONDS = 30.0


def _limited(limit: int, what: str) -> Any:
    """Documents a size limit that runs.limits.agent_data_check enforces (one function for the
    REST API and the MCP gateway, one answer: 422 invalid_arguments naming field and limit)."""
    return Field(min_length=1, json_schema_extra={"maxLength": limit}, description=what)


class RunIn(Body):
    goal: Annotated[
        StrictStr, _limited(limits.GOAL_MAX_CHARS, "What the run is for; approvers read it.")
    ]
    plan: dict[str, Any] | None = Field(
        None,
        description=f"The run's plan summary; at most {limits.PLAN_MAX_BYTES} bytes of "
        "canonical JSON.",
    )
    budget: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = Field(
        None, description="The most tool calls the run may make."
    )
    deadline: AwareDatetime | None = Field(
        None, description="RFC 3339 date-time with an offset; the run stops when it passes."
    )
    versions: dict[str, Any] | None = Field(
        None,
        description="Runner, model, policy, tool contract and other versions: at most "
        f"{limits.VERSIONS_MAX_KEYS} keys, each key and value at most "
        f"{limits.VERSIONS_MAX_CHARS} characters.",
        json_schema_extra={"maxProperties": limits.VERSIONS_MAX_KEYS},
    )

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline_is_text(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise ValueError("deadline must be an RFC 3339 date-time string")
        return value

    @field_validator("deadline")
    @classmethod
    def _deadline_in_range(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("deadline is out of range") from None


class ObservationIn(Body):
    source: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    ref: Annotated[StrictStr, Field(min_length=1, max_length=500)]
    content_hash: Digest
    summary: Annotated[
        StrictStr, _limited(limits.SUMMARY_MAX_CHARS, "What the agent saw, for the approver.")
    ]


class ActionIn(ProposalBody):
    action_id: ActionId
    tool: ToolName
    target: Target
    args: dict[str, Any]
    contract_version: ContractVersion
    observation_id: UUID | None = Field(
        None, description="The observation that justifies it; required when it needs approval."
    )


class PlanItemIn(ProposalBody):
    action_id: ActionId
    tool: ToolName
    target: Target
    args: dict[str, Any]
    contract_version: ContractVersion = "v1"


class PlanIn(Body):
    intents: Annotated[list[PlanItemIn], Field(min_length=1, max_length=1000)]
    observation_id: UUID | None = Field(
        None, description="The observation the plan rests on; required (a plan needs approval)."
    )


class EvidenceIn(Body):
    action_ids: Annotated[list[ActionId], Field(max_length=1000)]


class CompleteIn(Body):
    evidence: EvidenceIn


class CancelIn(Body):
    reason: Annotated[StrictStr, Field(max_length=2000)]


class BudgetOut(Schema):
    limit: int | None
    used: int


class CompletedOut(Schema):
    count: int = Field(description="Completed actions, imported ones included.")
    digest: str = Field(description="Running sha256 over their receipts, in order.")


class RunOut(Schema):
    id: UUID
    goal: str
    phase: Run.Phase
    state_version: int
    last_event_seq: int
    plan: dict[str, Any]
    completed_work: list[Any] = Field(
        description="The logical ids of the actions completed here, in receipt order."
    )
    completed: CompletedOut
    pending_work: list[Any]
    budget: BudgetOut
    deadline: datetime | None
    versions: dict[str, Any]
    next_eligible_at: datetime | None
    retry_count: int
    stop_reason: str
    evidence: dict[str, Any] | None
    created_by: str
    created_at: datetime
    updated_at: datetime


class RunPage(Schema):
    items: list[RunOut]
    count: int
    limit: int
    offset: int
    next: str | None


class ToolOut(Schema):
    name: str
    contract_version: str
    needs_approval: bool = Field(description="For this tenant (its tool policy, else default).")
    dedupes_by_key: bool
    queryable_by_key: bool
    effect_class: str
    compensation: str | None
    echoes_digest: bool = Field(
        description="The system echoes the intent digest in its receipt; false: the proof of a "
        "receipt is the idempotency key alone."
    )
    connector: str = Field(description="The connector the tool belongs to (docs/CONNECTORS.md).")
    kind: str = Field(description="The connector's kind: http, mcp, smtp or python.")
    description: str
    capabilities: list[str] = Field(description="What the tool promises, in words.")
    target_schema: dict[str, Any]
    args_schema: dict[str, Any]


class ObservationOut(Schema):
    id: UUID
    run_id: UUID
    source: str
    ref: str
    content_hash: str
    summary: str
    created_at: datetime


class ApprovalOut(Schema):
    decision: Literal["approve", "reject"]
    approver: str = Field(
        description="An opaque id of the person who decided, stable within the tenant "
        "(`approver-` and 16 hex digits); never their username."
    )
    reason: str
    created_at: datetime
    rule: str | None = Field(
        default=None,
        description="The name of the standing rule that made this grant; null when a person "
        "decided this intent.",
    )


class DecisionOut(Schema):
    outcome: Literal["approve", "reject", "not_required"]
    reason: str = Field(description="The operator's reason; for a rejection, why.")
    decided_at: datetime | None
    approvals: list[ApprovalOut]


class ReceiptOut(Schema):
    receipt_id: str
    status: str
    target_version: int | None
    idempotency_key: str
    intent_digest: str
    raw_response_hash: str
    source: str
    created_at: datetime


class CaseOut(Schema):
    id: UUID
    status: str
    reason: str = Field(description="The error class the case was opened for, as stored.")
    reason_kind: str = Field(
        description="Why the outcome is unknown, as the reconciliation pages name it: "
        "timeout_after_send, dropped_connection, malformed_answer, receipt_digest_mismatch, "
        "gateway_error (a 5xx after the send), crash_after_send, tool_crashed or unknown."
    )
    reason_label: str = Field(description="reason_kind in the pages' words.")
    url: str


class ActionRef(Schema):
    id: UUID
    action_id: str


class ActionOut(Schema):
    id: UUID
    run_id: UUID
    action_id: str
    tool: str
    target: str
    args: dict[str, Any]
    contract_version: str
    idempotency_key: str
    intent_digest: str
    observation_id: UUID | None
    status: Action.Status
    needs_approval: bool
    required_approvals: int
    expires_at: datetime | None
    attempt_count: int
    next_attempt_at: datetime | None
    error_class: str | None
    last_error: str | None
    decision: DecisionOut | None
    receipt: ReceiptOut | None
    reconciliation_case: CaseOut | None = Field(
        description="The action's latest reconciliation case (open while it is uncertain)."
    )
    supersedes: ActionRef | None
    superseded_by: ActionRef | None = Field(
        description="The edited intent an operator approved instead of this one."
    )
    created_at: datetime
    updated_at: datetime


class EffectOut(Schema):
    action_id: str
    tool: str
    target: str
    idempotency_key: str
    status: str
    receipt_id: str | None = None


class EffectsReport(Schema):
    done: list[EffectOut]
    in_doubt: list[EffectOut]
    not_started: list[EffectOut]


class CancelOut(Schema):
    run: RunOut
    report: EffectsReport


class CheckpointOut(Schema):
    schema_version: int
    key_id: str
    mac: str = Field(
        description="The server's HMAC over the checkpoint as stored, verified here before "
        "serving; it is for the server's own verification and does not cover this document "
        "(see mac_scope)."
    )
    state: dict[str, Any] = Field(
        description="The signed state, except that `approval.approvers` are opaque approver "
        "ids (`approver-` and 16 hex digits), never user ids or usernames."
    )
    mac_scope: Literal["server_only"] = Field(
        description="The MAC covers the stored state, which names approvers by user id; "
        "this document shows them as opaque ids, so it does not verify against the MAC."
    )


class ActionMatches(Schema):
    items: list[ActionOut]


class PlanOut(Schema):
    id: UUID
    run_id: UUID
    digest: str = Field(description="sha256 over the sorted intent digests: what is approved.")
    status: Literal["waiting_approval", "approved", "rejected", "expired"]
    size: int
    required_approvals: int
    expires_at: datetime
    decision_reason: str
    intents: list[ActionOut] = Field(description="The plan's intents, in execution order.")
