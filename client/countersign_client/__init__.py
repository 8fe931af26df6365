"""Python client for Countersign's agent API (depends only on requests).

from countersign_client import Countersign, Intent, Observation, requires_approval
"""

from __future__ import annotations

from countersign_client.approval import (
    Intent,
    Observation,
    Plan,
    requires_approval,
    requires_plan_approval,
)
from countersign_client.client import Countersign, content_hash, receipt_of
from countersign_client.errors import (
    ActionFailed,
    ActionNotDone,
    ApiError,
    BadRequest,
    Cancelled,
    CheckpointInvalid,
    Conflict,
    ConnectionFailed,
    CountersignError,
    Expired,
    Forbidden,
    IdempotencyKeyInFlight,
    IdempotencyKeyReused,
    IntentConflict,
    InvalidArguments,
    MissingEvidence,
    NotFound,
    Rejected,
    ServerError,
    Unauthorized,
    Uncertain,
    Unprocessable,
    ValidationFailed,
    WaitTimeout,
)

__version__ = "0.1.0"
__all__ = [
    "ActionFailed",
    "ActionNotDone",
    "ApiError",
    "BadRequest",
    "Cancelled",
    "CheckpointInvalid",
    "Conflict",
    "ConnectionFailed",
    "Countersign",
    "CountersignError",
    "Expired",
    "Forbidden",
    "IdempotencyKeyInFlight",
    "IdempotencyKeyReused",
    "Intent",
    "IntentConflict",
    "InvalidArguments",
    "MissingEvidence",
    "NotFound",
    "Observation",
    "Plan",
    "Rejected",
    "ServerError",
    "Unauthorized",
    "Uncertain",
    "Unprocessable",
    "ValidationFailed",
    "WaitTimeout",
    "content_hash",
    "receipt_of",
    "requires_approval",
    "requires_plan_approval",
]
