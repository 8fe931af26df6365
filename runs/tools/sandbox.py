"""The sandbox's five tools, reached over HTTP at settings.SANDBOX_URL (see sandbox/README.md).

The sandbox computes each write's intent digest itself with Countersign's public formula,
so a receipt proves which intent it answers: the adapters send the normalized target and
args exactly as frozen, and refuse a receipt for any other digest.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any
from urllib.parse import quote

from django.conf import settings

from runs.tools.base import Tool
from runs.tools.calls import Timeout, ToolCall, ToolReceipt
from runs.tools.errors import InvalidArguments, TransientError
from runs.tools.http import (
    HttpAnswer,
    raise_for_status,
    read_json,
    send_read,
    send_write,
    write_receipt,
)
from runs.tools.schema import DRAFT_2020_12

MAX_AMOUNT_CENTS = 100_000_000
_AMOUNT = {"type": "integer", "minimum": 1, "maximum": MAX_AMOUNT_CENTS}
TICKET_ID = {
    "type": "string",
    "pattern": "^ticket-[1-9][0-9]{0,8}$",
    "description": "A ticket id such as ticket-7 (case-insensitive; normalized to lower case).",
}
RECIPIENT = {
    "type": "string",
    "pattern": "^[^\\s]+$",
    "maxLength": 254,
    "description": "The recipient, e.g. ops@example.com (normalized to lower case).",
}
CUSTOMER_ID = {
    "type": "string",
    "pattern": "^[A-Za-z0-9_-]{1,64}$",
    "description": "The customer id, e.g. cus_42 (case-sensitive).",
}
CHARGE_ID = {
    "type": "string",
    "pattern": "^ch_[0-9a-f]{32}$",
    "description": "The receipt id of the charge to refund: ch_ and 32 hex digits.",
}


def _object_schema(title: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "$schema": DRAFT_2020_12,
        "title": title,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _stripped(args: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        if isinstance(args.get(name), str):
            args[name] = args[name].strip()
    return args


class SandboxTool(Tool):
    """The HTTP plumbing the sandbox's tools share; each tool says what it sends where."""

    def __init__(self, *, base_url: str | None = None) -> None:
        # None: settings.SANDBOX_URL, read at every call (tests point it at live_server).
        self.base_url = base_url

    def url(self, *segments: str) -> str:
        base = self.base_url or settings.SANDBOX_URL
        if not base.endswith("/"):
            base += "/"
        return base + "/".join(quote(segment, safe="") for segment in segments)

    def query(self, idempotency_key: str, *, timeout: Timeout) -> ToolReceipt | None:
        if not self.queryable_by_key:
            return super().query(idempotency_key, timeout=timeout)
        answer = send_read(self.url("receipts", idempotency_key), timeout=timeout)
        if answer.status == 404 and answer.problem()[0] == "not_found":
            return None
        if answer.status == 404:
            # Not the sandbox's "no such key" (a wrong SANDBOX_URL?): prove nothing.
            raise TransientError(f"receipts endpoint not found at {self.url('receipts')}")
        raise_for_status(answer, write=False)
        try:
            receipt = ToolReceipt.from_response(
                read_json(answer), raw_response_hash=answer.raw_response_hash
            )
        except ValueError as error:
            raise TransientError(f"malformed receipt for {idempotency_key!r}: {error}") from error
        if receipt.idempotency_key != idempotency_key:
            raise TransientError(f"asked for key {idempotency_key!r}, got another key's receipt")
        return receipt

    def _read_object(
        self, *segments: str, timeout: Timeout, fields: dict[str, type]
    ) -> tuple[dict[str, Any], HttpAnswer]:
        """A GET answered by an object holding fields (name -> type); else TransientError."""
        answer = send_read(self.url(*segments), timeout=timeout)
        raise_for_status(answer, write=False)
        state = read_json(answer)
        if not isinstance(state, dict) or not all(
            isinstance(state.get(name), kind) and not isinstance(state.get(name), bool)
            for name, kind in fields.items()
        ):
            raise TransientError(f"malformed answer from {self.url(*segments)}")
        return state, answer

    def _read_ticket(self, ticket_id: str, *, timeout: Timeout) -> tuple[dict, HttpAnswer]:
        return self._read_object(
            "tickets", ticket_id, timeout=timeout, fields={"id": str, "status": str, "version": int}
        )


class SandboxWriteTool(SandboxTool):
    """A tool whose execute() is one POST answered by a receipt."""

    @abstractmethod
    def write_request(self, call: ToolCall) -> tuple[tuple[str, ...], dict[str, Any]]:
        """(URL path segments, JSON body) of the call's POST."""

    def execute(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        self.check_call(call)
        segments, body = self.write_request(call)
        answer = send_write(
            "POST",
            self.url(*segments),
            body=body,
            timeout=timeout,
            idempotency_key=call.idempotency_key if self.dedupes_by_key else None,
        )
        raise_for_status(answer, write=True)
        return write_receipt(answer, call=call, keyed=self.dedupes_by_key)


class TicketLookup(SandboxTool):
    """A read. execute() returns a read receipt: receipt_id "<ticket>@v<version>",
    target_version the version seen, status the ticket's status, no idempotency key."""

    name = "ticket.lookup"
    needs_approval = False
    dedupes_by_key = False
    queryable_by_key = False
    effect_class = "read_only"
    retry_after_uncertain_allowed = True
    target_schema = TICKET_ID
    args_schema = _object_schema("ticket.lookup arguments (none)", {}, [])

    def prepare_target(self, target: str) -> str:
        return target.strip().lower()

    def execute(self, call: ToolCall, *, timeout: Timeout) -> ToolReceipt:
        self.check_call(call)
        state, answer = self._read_ticket(call.target, timeout=timeout)
        return ToolReceipt(
            idempotency_key=None,
            intent_digest=call.intent_digest,
            receipt_id=f"{state['id']}@v{state['version']}",
            target_version=state["version"],
            status=state["status"],
            raw_response_hash=answer.raw_response_hash,
        )

    def read(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        return self._read_ticket(target, timeout=timeout)[0]


class TicketClose(SandboxWriteTool):
    name = "ticket.close"
    needs_approval = True
    dedupes_by_key = True
    queryable_by_key = True
    effect_class = "idempotent"
    retry_after_uncertain_allowed = True
    target_schema = TICKET_ID
    args_schema = _object_schema(
        "ticket.close arguments",
        {"resolution": {"type": "string", "minLength": 1, "maxLength": 64}},
        [],
    )

    def prepare_target(self, target: str) -> str:
        return target.strip().lower()

    def prepare_args(self, args: dict[str, Any]) -> dict[str, Any]:
        return _stripped(args, "resolution")

    def write_request(self, call: ToolCall) -> tuple[tuple[str, ...], dict[str, Any]]:
        return ("tickets", call.target, "close"), {"args": call.args}

    def read(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        return self._read_ticket(target, timeout=timeout)[0]

    def is_satisfied(self, *, target: str, args: dict[str, Any], state: dict[str, Any]) -> bool:
        return state.get("status") == "closed"


class NotifySend(SandboxWriteTool):
    """The notifier has no idempotency: a second send is a second message. read() lists
    what the recipient was sent, as evidence for a human; it never proves "already sent"
    (the same text may rightly be sent twice), so is_satisfied is always False."""

    name = "notify.send"
    needs_approval = True
    dedupes_by_key = False
    queryable_by_key = False
    effect_class = "not_retriable"
    retry_after_uncertain_allowed = False
    target_schema = RECIPIENT
    args_schema = _object_schema(
        "notify.send arguments",
        {"body": {"type": "string", "minLength": 1, "maxLength": 2000}},
        ["body"],
    )

    def prepare_target(self, target: str) -> str:
        return target.strip().lower()

    def prepare_args(self, args: dict[str, Any]) -> dict[str, Any]:
        return _stripped(args, "body")

    def write_request(self, call: ToolCall) -> tuple[tuple[str, ...], dict[str, Any]]:
        return ("notifications",), {"recipient": call.target, "body": call.args["body"]}

    def read(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        url = self.url("notifications")
        answer = send_read(url, params={"recipient": target}, timeout=timeout)
        raise_for_status(answer, write=False)
        listing = read_json(answer)
        if not isinstance(listing, dict) or not isinstance(listing.get("notifications"), list):
            raise TransientError(f"malformed notification list from {url}")
        return {"recipient": target, "notifications": listing["notifications"]}


class PaymentCharge(SandboxWriteTool):
    name = "payment.charge"
    needs_approval = True
    dedupes_by_key = True
    queryable_by_key = True
    effect_class = "idempotent"
    retry_after_uncertain_allowed = True
    compensation = "payment.refund"
    target_schema = CUSTOMER_ID
    args_schema = _object_schema(
        "payment.charge arguments",
        {
            "amount_cents": _AMOUNT,
            "currency": {
                "type": "string",
                "pattern": "^[A-Z]{3}$",
                "description": "ISO 4217 code, normalized to upper case.",
            },
        },
        ["amount_cents", "currency"],
    )

    def prepare_args(self, args: dict[str, Any]) -> dict[str, Any]:
        if isinstance(args.get("currency"), str):
            args["currency"] = args["currency"].strip().upper()
        return args

    def write_request(self, call: ToolCall) -> tuple[tuple[str, ...], dict[str, Any]]:
        return ("payments", "charges"), {"customer": call.target, **call.args}

    def compensation_call(
        self, *, receipt: ToolReceipt, args: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        if not isinstance(args.get("amount_cents"), int):
            raise InvalidArguments("the charge's args lack amount_cents", field="args")
        return receipt.receipt_id, {"amount_cents": args["amount_cents"]}


class PaymentRefund(SandboxWriteTool):
    name = "payment.refund"
    needs_approval = True
    dedupes_by_key = True
    queryable_by_key = True
    effect_class = "idempotent"
    retry_after_uncertain_allowed = True
    target_schema = CHARGE_ID
    args_schema = _object_schema(
        "payment.refund arguments", {"amount_cents": _AMOUNT}, ["amount_cents"]
    )

    def prepare_target(self, target: str) -> str:
        return target.strip().lower()

    def write_request(self, call: ToolCall) -> tuple[tuple[str, ...], dict[str, Any]]:
        return ("payments", "refunds"), {"charge": call.target, **call.args}

    def read(self, target: str, *, timeout: Timeout) -> dict[str, Any] | None:
        """The charge: amount, refunded so far, version (evidence; never "satisfied")."""
        fields = {"id": str, "amount_cents": int, "refunded_cents": int, "version": int}
        return self._read_object("payments", "charges", target, timeout=timeout, fields=fields)[0]


SANDBOX_TOOLS: tuple[type[SandboxTool], ...] = (
    TicketLookup,
    TicketClose,
    NotifySend,
    PaymentCharge,
    PaymentRefund,
)
