"""What travels between a worker and a tool: the frozen call and the external receipt.

Plain data with no dependency on the rest of runs.tools, so errors, schema and the tool
contract can all point at it (and never at each other in a circle).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

RECEIPT_FIELDS = ("idempotency_key", "intent_digest", "receipt_id", "target_version", "status")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
Timeout = tuple[float, float]


@dataclass(frozen=True)
class ToolCall:
    """One frozen intent on its way out: always the same key and digest on every try."""

    tool: str
    target: str
    args: dict[str, Any]
    idempotency_key: str
    intent_digest: str


@dataclass(frozen=True)
class ToolReceipt:
    """The external system's proof of one effect (or, for a read, of what it saw)."""

    idempotency_key: str | None
    intent_digest: str
    receipt_id: str
    target_version: int | None
    status: str
    # "sha256:" + hex of the raw response body the receipt was read from.
    raw_response_hash: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> ToolReceipt:
        """A receipt from its to_dict() form; ValueError if anything is missing or ill-typed."""
        if not isinstance(data, dict):
            raise ValueError("a receipt must be an object")
        return cls.from_response(data, raw_response_hash=data.get("raw_response_hash"))

    @classmethod
    def from_response(cls, data: Any, *, raw_response_hash: Any) -> ToolReceipt:
        """A receipt from an external answer's JSON; ValueError naming the first bad field."""
        if not isinstance(data, dict):
            raise ValueError("the receipt is not a JSON object")
        missing = [name for name in RECEIPT_FIELDS if name not in data]
        if missing:
            raise ValueError(f"the receipt lacks {', '.join(missing)}")
        key, digest = data["idempotency_key"], data["intent_digest"]
        version = data["target_version"]
        if key is not None and (not isinstance(key, str) or not key):
            raise ValueError("idempotency_key must be a non-empty string or null")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise ValueError("intent_digest must be 'sha256:' and 64 hex digits")
        for name in ("receipt_id", "status"):
            value = data[name]
            if not isinstance(value, str) or not 1 <= len(value) <= 200:
                raise ValueError(f"{name} must be a string of 1 to 200 characters")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise ValueError("target_version must be an integer or null")
        if not isinstance(raw_response_hash, str) or not _DIGEST.fullmatch(raw_response_hash):
            raise ValueError("raw_response_hash must be 'sha256:' and 64 hex digits")
        return cls(
            idempotency_key=key,
            intent_digest=digest,
            receipt_id=data["receipt_id"],
            target_version=version,
            status=data["status"],
            raw_response_hash=raw_response_hash,
        )
