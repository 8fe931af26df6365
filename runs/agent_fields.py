"""What every way in (the REST API under /api/v1, the MCP gateway) takes from an agent and
gives back, defined once: the fields' patterns and limits, the proposal body's rules, the MCP
call's body, and a receipt as an agent reads it.

Bodies forbid unknown fields and never coerce types (a "5" is not a budget); string limits
match the columns they are stored in, so a valid request never overflows one.
"""

from __future__ import annotations

from typing import Annotated, Any

from ninja import Schema
from pydantic import ConfigDict, Field, StrictStr, model_validator

from runs.action_ids import reserved_action_id_refusal
from runs.exceptions import InvalidArguments
from runs.models import Action

ACTION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._~-]*$"

ActionId = Annotated[
    StrictStr,
    Field(
        min_length=1,
        max_length=200,
        pattern=ACTION_ID_PATTERN,
        description="The agent's stable logical id of the action, e.g. close-ticket-7.",
    ),
]
ToolName = Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_.-]*$")]
ContractVersion = Annotated[
    StrictStr, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9._-]+$")
]
Digest = Annotated[StrictStr, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
Target = Annotated[StrictStr, Field(min_length=1, max_length=500)]


class Body(Schema):
    model_config = ConfigDict(extra="forbid")


class ProposalBody(Body):
    """A body proposing an intent under the agent's own logical id. A reserved id
    (runs.action_ids, look-alikes read as a person reads them) is refused before any other
    rule, as 422 invalid_arguments naming the rule, as the proposal service itself would:
    the pattern below would refuse a look-alike too, but without saying why."""

    @model_validator(mode="before")
    @classmethod
    def _action_id_not_reserved(cls, data: Any) -> Any:
        action_id = data.get("action_id") if isinstance(data, dict) else None
        refusal = reserved_action_id_refusal(action_id) if isinstance(action_id, str) else None
        if refusal is not None:
            # Not a ValueError: pydantic lets it through to the API's invalid_arguments.
            raise InvalidArguments(refusal)
        return data


class McpCallIn(ProposalBody):
    """A catalog tool's call through /mcp/: the REST API's limits on the same fields."""

    target: Target
    args: dict[str, Any] = Field(default_factory=dict)
    action_id: ActionId | None = None


def receipt_body(action: Action) -> dict[str, Any] | None:
    receipt = getattr(action, "receipt", None)
    if receipt is None:
        return None
    return {
        "receipt_id": receipt.receipt_id,
        "status": receipt.status,
        "target_version": receipt.target_version,
        "idempotency_key": receipt.idempotency_key,
        "intent_digest": receipt.intent_digest,
        "raw_response_hash": receipt.raw_response_hash,
        "source": receipt.source,
        "created_at": receipt.created_at,
    }
