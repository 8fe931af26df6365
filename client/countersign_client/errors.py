"""Typed exceptions: API problems (RFC 9457) by their stable code, and action outcomes."""

from __future__ import annotations

from typing import Any


class CountersignError(Exception):
    """Base of every error this client raises."""


class ConnectionFailed(CountersignError):
    """The server could not be reached (after the client's own retries)."""


class ApiError(CountersignError):
    """The server answered with a problem (application/problem+json)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.code: str = str(problem.get("code", ""))
        self.type: str = str(problem.get("type", "about:blank"))
        self.title: str = str(problem.get("title", ""))
        self.detail: str = str(problem.get("detail", ""))
        super().__init__(f"{status} {self.code or self.title}: {self.detail}")


class BadRequest(ApiError):
    """400: the body is not acceptable JSON (see `problem["rule"]`) or the key is malformed."""


class Unauthorized(ApiError):
    """401: missing, unknown or revoked token."""


class Forbidden(ApiError):
    """403: not allowed."""


class NotFound(ApiError):
    """404: no such object for this token's tenant."""


class Conflict(ApiError):
    """409: the state does not allow it now (invalid_transition, stale_state, ...)."""


class IdempotencyKeyInFlight(Conflict):
    """409: a request with the same Idempotency-Key is still running."""


class Unprocessable(ApiError):
    """422: well-formed, but means something invalid."""


class ValidationFailed(Unprocessable):
    """422 validation_error: the request does not match the API's schema."""


class InvalidArguments(Unprocessable):
    """422 invalid_arguments."""


class MissingEvidence(Unprocessable):
    """422 missing_evidence: completion needs receipts for the named actions."""


class IntentConflict(Unprocessable):
    """422 intent_conflict: this logical action was frozen with other arguments."""


class IdempotencyKeyReused(Unprocessable):
    """422 idempotency_key_reused: the key was first used for another request."""


class ServerError(ApiError):
    """5xx."""


class CheckpointInvalid(ServerError):
    """500 checkpoint_invalid: the stored checkpoint failed verification on the server."""


_BY_CODE: dict[str, type[ApiError]] = {
    "idempotency_key_in_flight": IdempotencyKeyInFlight,
    "validation_error": ValidationFailed,
    "invalid_arguments": InvalidArguments,
    "missing_evidence": MissingEvidence,
    "intent_conflict": IntentConflict,
    "idempotency_key_reused": IdempotencyKeyReused,
    "checkpoint_invalid": CheckpointInvalid,
}
_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Unprocessable,
}


def error_for(status: int, problem: dict[str, Any]) -> ApiError:
    """The most specific exception for a problem: by its code, else by its status."""
    error_class = _BY_CODE.get(str(problem.get("code", "")))
    if error_class is None:
        error_class = ServerError if status >= 500 else _BY_STATUS.get(status, ApiError)
    return error_class(status, problem)


class ActionNotDone(CountersignError):
    """The action ended without a receipt. `action` is its last state from the server."""

    def __init__(self, message: str, action: dict[str, Any]) -> None:
        super().__init__(message)
        self.action = action


class Rejected(ActionNotDone):
    """An operator rejected the intent; `reason` says why."""

    def __init__(self, action: dict[str, Any]) -> None:
        decision = action.get("decision") or {}
        self.reason: str = decision.get("reason", "")
        super().__init__(f"action {action['action_id']} was rejected: {self.reason}", action)


class Expired(ActionNotDone):
    """Nobody decided before the approval request expired; nothing was sent."""

    def __init__(self, action: dict[str, Any]) -> None:
        super().__init__(f"the approval request for {action['action_id']} expired", action)


class Uncertain(ActionNotDone):
    """The effect may or may not have happened; a reconciliation case decides. The run's
    writes are stopped until then. `case_url` is the case's page (None if not yet open)."""

    def __init__(self, action: dict[str, Any]) -> None:
        case = action.get("reconciliation_case") or {}
        self.case_id: str | None = case.get("id")
        self.case_url: str | None = case.get("url")
        where = self.case_url or "a reconciliation case (not opened yet)"
        super().__init__(
            f"the outcome of {action['action_id']} is uncertain "
            f"({action.get('error_class') or 'unknown'}); see {where}",
            action,
        )


class ActionFailed(ActionNotDone):
    """The action failed for good (e.g. the tool refused it); `error_class` says how."""

    def __init__(self, action: dict[str, Any]) -> None:
        self.error_class: str | None = action.get("error_class")
        self.error: str | None = action.get("last_error")
        super().__init__(
            f"action {action['action_id']} failed ({self.error_class}): {self.error}", action
        )


class Cancelled(ActionNotDone):
    """The run stopped (cancelled, out of budget or past its deadline) before it was sent."""

    def __init__(self, action: dict[str, Any]) -> None:
        super().__init__(f"action {action['action_id']} was cancelled with its run", action)


class WaitTimeout(CountersignError, TimeoutError):
    """No decision or outcome within the timeout; `action` is its last state."""

    def __init__(self, action: dict[str, Any], timeout: float) -> None:
        super().__init__(
            f"action {action['action_id']} still {action['status']} after {timeout:g} s"
        )
        self.action = action
