"""Refusals the sandbox answers as JSON {"type", "detail"} with an HTTP status."""

from __future__ import annotations


class SandboxError(Exception):
    status = 400
    type = "invalid_request"

    def __init__(self, detail: str, *, type: str | None = None, **extra: object) -> None:
        super().__init__(detail)
        self.detail = detail
        if type is not None:
            self.type = type
        # Extra members of the JSON body (e.g. both digests of an idempotency conflict).
        self.extra = extra

    def as_json(self) -> dict[str, object]:
        return {"type": self.type, "detail": self.detail, **self.extra}


class BadRequest(SandboxError):
    status = 400


class NotFound(SandboxError):
    status = 404
    type = "not_found"


class Conflict(SandboxError):
    """A business rule refused the request (ticket already closed, refund too large)."""

    status = 409
    type = "conflict"


class IdempotencyConflict(SandboxError):
    """The key was first used for a different intent."""

    status = 422
    type = "idempotency_conflict"
