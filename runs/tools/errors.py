"""How a tool call can fail, classified so the worker knows what it may do next.

Only TransientError is retried (same key, backoff). ResultUncertain means the request may
have reached the external system: it is never a failure, and the worker queries by key or
opens a reconciliation case instead of sending again.
"""

from __future__ import annotations

from typing import ClassVar

from runs.tools.calls import ToolReceipt


class ToolError(Exception):
    """Base of every classified tool failure. `error_class` is stable (stored on attempts)."""

    error_class: ClassVar[str] = "tool_error"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        # The external system's HTTP status, when an answer arrived.
        self.http_status = http_status

    def __reduce__(self):
        # Keyword-only constructors defeat the default pickling (RQ and checkpoints copy these).
        return (_restore, (type(self), self.args, self.__dict__))


class TransientError(ToolError):
    """Provably not applied (refused before sending, 5xx, 429): retry with the same key."""

    error_class = "transient"
    retriable = True

    def __init__(
        self, message: str, *, retry_after: float | None = None, http_status: int | None = None
    ) -> None:
        super().__init__(message, http_status=http_status)
        self.retry_after = retry_after


class InvalidArguments(ToolError):
    error_class = "invalid_arguments"

    def __init__(
        self, message: str, *, field: str | None = None, http_status: int | None = None
    ) -> None:
        super().__init__(message, http_status=http_status)
        # The offending argument ("target", "args.amount_cents"), when one is to blame.
        self.field = field


class PermissionDenied(ToolError):
    error_class = "permission_denied"


class BusinessRejection(ToolError):
    """The external system understood and refused (ticket already closed, refund too big)."""

    error_class = "business_rejection"


class IdempotencyConflict(ToolError):
    """The external system holds this key for a different intent."""

    error_class = "idempotency_conflict"


class UnsupportedTool(ToolError):
    """Unknown tool or contract version, or an operation this tool does not offer."""

    error_class = "unsupported_tool"


class ConnectorNotEnabled(UnsupportedTool):
    """The tool is configured, but its connector is not enabled for the tenant asking."""

    error_class = "connector_not_enabled"

    def __init__(self, *, tool: str, connector: str, tenant: str) -> None:
        super().__init__(f"connector {connector!r} is not enabled for tenant {tenant!r}")
        self.tool, self.connector, self.tenant = tool, connector, tenant


class ResultUncertain(ToolError):
    """The request may have been applied: never a failure, never blindly sent again."""

    error_class = "tool_result_uncertain"

    def __init__(
        self,
        message: str,
        *,
        raw_response_hash: str | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message, http_status=http_status)
        # "sha256:..." of whatever partial or malformed body arrived, as evidence.
        self.raw_response_hash = raw_response_hash


class ToolCrashed(ResultUncertain):
    """The tool raised something that is not a ToolError (a bug in it, a KeyError, a
    MemoryError): nothing is known about the call, so after a send it is an unknown outcome
    and a query or read that crashed proved nothing (Tool.contained)."""

    error_class = "tool_crashed"


class ReceiptMismatch(ResultUncertain):
    """A receipt arrived, but not for this intent (digest or key differs): reconcile it."""

    error_class = "receipt_digest_mismatch"

    def __init__(self, message: str, *, receipt: ToolReceipt, http_status: int | None = None):
        super().__init__(
            message, raw_response_hash=receipt.raw_response_hash, http_status=http_status
        )
        self.receipt = receipt


def _restore(cls: type[ToolError], args: tuple, state: dict) -> ToolError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error
