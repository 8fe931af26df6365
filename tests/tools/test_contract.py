"""The adapter contract without any I/O: normalization, call checks, receipts, registry."""

from __future__ import annotations

import pickle

import pytest

from control.foundation.canonical import intent_digest
from runs.tools.calls import ToolCall, ToolReceipt
from runs.tools.errors import (
    BusinessRejection,
    IdempotencyConflict,
    InvalidArguments,
    PermissionDenied,
    ReceiptMismatch,
    ResultUncertain,
    ToolError,
    TransientError,
    UnsupportedTool,
)
from runs.tools.registry import all_tools, get_tool

TIMEOUT = (1.0, 1.0)
RECEIPT = ToolReceipt(
    idempotency_key="run-1:charge:cus_42:v1",
    intent_digest="sha256:" + "a" * 64,
    receipt_id="ch_" + "b" * 32,
    target_version=None,
    status="charged",
    raw_response_hash="sha256:" + "c" * 64,
)


def call_for(tool: str, target: str, args: dict, *, key: str = "run-1:a:t:v1") -> ToolCall:
    return ToolCall(
        tool=tool,
        target=target,
        args=args,
        idempotency_key=key,
        intent_digest=intent_digest(tool=tool, target=target, args=args),
    )


@pytest.mark.parametrize(
    ("tool", "target", "args", "normal"),
    [
        (
            "ticket.close",
            " Ticket-7 ",
            {"resolution": " fixed "},
            ("ticket-7", {"resolution": "fixed"}),
        ),
        ("ticket.close", "ticket-7", {}, ("ticket-7", {})),
        ("ticket.lookup", "TICKET-12", {}, ("ticket-12", {})),
        ("notify.send", " Ops@Example.com", {"body": " hi\n"}, ("ops@example.com", {"body": "hi"})),
        (
            "payment.charge",
            " cus_42 ",
            {"amount_cents": 500, "currency": " eur"},
            ("cus_42", {"amount_cents": 500, "currency": "EUR"}),
        ),
        (
            "payment.refund",
            "CH_" + "AB" * 16,
            {"amount_cents": 1},
            ("ch_" + "ab" * 16, {"amount_cents": 1}),
        ),
    ],
)
def test_normalize_spells_targets_and_args_one_way(tool, target, args, normal):
    assert get_tool(tool).normalize(target=target, args=args) == normal


def test_normalize_leaves_the_callers_args_untouched():
    args = {"amount_cents": 500, "currency": "eur"}

    get_tool("payment.charge").normalize(target="cus_42", args=args)

    assert args == {"amount_cents": 500, "currency": "eur"}


@pytest.mark.parametrize(
    ("tool", "target", "args", "field"),
    [
        ("ticket.close", "ticket-7", {"resolution": "fixed", "note": "x"}, "args.note"),
        ("ticket.close", "ticket-7", {"resolution": 3}, "args.resolution"),
        ("ticket.close", "ticket-7", {"resolution": "   "}, "args.resolution"),
        ("ticket.close", "ticket-7", {"resolution": "x" * 65}, "args.resolution"),
        ("ticket.close", "ticket-0", {}, "target"),
        ("ticket.close", "ticket-7x", {}, "target"),
        ("ticket.close", "issue-7", {}, "target"),
        ("ticket.close", 7, {}, "target"),
        ("ticket.close", "ticket-7", ["resolution"], "args"),
        ("ticket.lookup", "ticket-7", {"fields": "all"}, "args.fields"),
        ("notify.send", "ops@example.com", {}, "args.body"),
        ("notify.send", "ops team", {"body": "hi"}, "target"),
        ("notify.send", "", {"body": "hi"}, "target"),
        ("notify.send", "ops@example.com", {"body": ""}, "args.body"),
        ("notify.send", "ops@example.com", {"body": "x" * 2001}, "args.body"),
        (
            "payment.charge",
            "cus_42",
            {"amount_cents": True, "currency": "EUR"},
            "args.amount_cents",
        ),
        ("payment.charge", "cus_42", {"amount_cents": 5.0, "currency": "EUR"}, "args.amount_cents"),
        ("payment.charge", "cus_42", {"amount_cents": "5", "currency": "EUR"}, "args.amount_cents"),
        ("payment.charge", "cus_42", {"amount_cents": 0, "currency": "EUR"}, "args.amount_cents"),
        ("payment.charge", "cus_42", {"amount_cents": -1, "currency": "EUR"}, "args.amount_cents"),
        (
            "payment.charge",
            "cus_42",
            {"amount_cents": 100_000_001, "currency": "EUR"},
            "args.amount_cents",
        ),
        ("payment.charge", "cus_42", {"amount_cents": 5, "currency": "EURO"}, "args.currency"),
        ("payment.charge", "cus_42", {"amount_cents": 5, "currency": 978}, "args.currency"),
        ("payment.charge", "cus_42", {"amount_cents": 5}, "args.currency"),
        ("payment.charge", "cus 42", {"amount_cents": 5, "currency": "EUR"}, "target"),
        ("payment.refund", "ch_123", {"amount_cents": 5}, "target"),
        ("payment.refund", "ch_" + "a" * 32, {"amount_cents": None}, "args.amount_cents"),
    ],
)
def test_normalize_refuses_bad_arguments_naming_the_field(tool, target, args, field):
    with pytest.raises(InvalidArguments) as refused:
        get_tool(tool).normalize(target=target, args=args)

    assert refused.value.field == field
    assert field in str(refused.value)
    assert refused.value.error_class == "invalid_arguments"
    assert not refused.value.retriable


@pytest.mark.usefixtures("unreachable_sandbox")
def test_a_call_whose_digest_does_not_match_its_intent_is_refused_before_sending():
    call = call_for("ticket.close", "ticket-7", {"resolution": "fixed"})
    forged = ToolCall(**{**call.__dict__, "intent_digest": "sha256:" + "0" * 64})

    with pytest.raises(InvalidArguments, match="intent_digest"):
        get_tool("ticket.close").execute(forged, timeout=TIMEOUT)


@pytest.mark.usefixtures("unreachable_sandbox")
def test_a_call_not_in_normal_form_is_refused_before_sending():
    call = call_for("ticket.close", "TICKET-7", {})

    with pytest.raises(InvalidArguments, match="normal form"):
        get_tool("ticket.close").execute(call, timeout=TIMEOUT)


@pytest.mark.usefixtures("unreachable_sandbox")
def test_a_call_for_another_tool_is_refused():
    call = call_for("ticket.lookup", "ticket-7", {})

    with pytest.raises(UnsupportedTool):
        get_tool("ticket.close").execute(call, timeout=TIMEOUT)


def test_the_registry_knows_the_five_sandbox_tools_and_their_declarations():
    declared = {
        tool.name: (
            tool.contract_version,
            tool.needs_approval,
            tool.dedupes_by_key,
            tool.queryable_by_key,
            tool.effect_class,
            tool.retry_after_uncertain_allowed,
            tool.compensation,
        )
        for tool in all_tools()
    }

    assert declared == {
        "notify.send": ("v1", True, False, False, "not_retriable", False, None),
        "payment.charge": ("v1", True, True, True, "idempotent", True, "payment.refund"),
        "payment.refund": ("v1", True, True, True, "idempotent", True, None),
        "ticket.close": ("v1", True, True, True, "idempotent", True, None),
        "ticket.lookup": ("v1", False, False, False, "read_only", True, None),
    }


def test_the_registry_refuses_unknown_tools_and_versions():
    assert get_tool("ticket.close", "v1") is get_tool("ticket.close")

    with pytest.raises(UnsupportedTool, match="unknown tool"):
        get_tool("ticket.reopen")
    with pytest.raises(UnsupportedTool, match="v2"):
        get_tool("ticket.close", "v2")


def test_each_tool_describes_its_arguments_as_a_closed_json_schema():
    for tool in all_tools():
        described = tool.describe()

        assert described["args_schema"]["$schema"] == (
            "https://json-schema.org/draft/2020-12/schema"
        )
        assert described["args_schema"]["type"] == "object"
        assert described["args_schema"]["additionalProperties"] is False
        assert described["target_schema"]["type"] == "string"


def test_only_payment_charge_has_a_compensation_and_it_refunds_the_whole_charge():
    compensation = get_tool("payment.charge").compensation_call(
        receipt=RECEIPT, args={"amount_cents": 500, "currency": "EUR"}
    )

    assert compensation == (RECEIPT.receipt_id, {"amount_cents": 500})
    target, args = get_tool("payment.refund").normalize(
        target=compensation[0], args=compensation[1]
    )
    assert (target, args) == compensation
    with pytest.raises(UnsupportedTool):
        get_tool("ticket.close").compensation_call(receipt=RECEIPT, args={})


def test_notify_cannot_be_queried_by_key():
    with pytest.raises(UnsupportedTool):
        get_tool("notify.send").query("some-key", timeout=TIMEOUT)


def test_a_receipt_survives_its_dict_form():
    assert ToolReceipt.from_dict(RECEIPT.to_dict()) == RECEIPT


@pytest.mark.parametrize(
    "change",
    [
        {"intent_digest": "md5:abc"},
        {"receipt_id": ""},
        {"target_version": True},
        {"target_version": "3"},
        {"status": None},
        {"idempotency_key": 5},
        {"raw_response_hash": None},
    ],
)
def test_a_receipt_with_a_bad_field_is_refused(change):
    with pytest.raises(ValueError, match=next(iter(change))):
        ToolReceipt.from_dict({**RECEIPT.to_dict(), **change})


@pytest.mark.parametrize(
    ("error", "error_class", "retriable"),
    [
        (TransientError("x", retry_after=3.0), "transient", True),
        (InvalidArguments("x", field="target"), "invalid_arguments", False),
        (PermissionDenied("x"), "permission_denied", False),
        (BusinessRejection("x"), "business_rejection", False),
        (IdempotencyConflict("x"), "idempotency_conflict", False),
        (UnsupportedTool("x"), "unsupported_tool", False),
        (ResultUncertain("x", raw_response_hash="sha256:00"), "tool_result_uncertain", False),
        (ReceiptMismatch("x", receipt=RECEIPT), "receipt_digest_mismatch", False),
    ],
)
def test_errors_carry_their_class_and_survive_pickling(error, error_class, retriable):
    copied = pickle.loads(pickle.dumps(error))

    assert isinstance(copied, ToolError)
    assert (copied.error_class, copied.retriable) == (error_class, retriable)
    assert copied.__dict__ == error.__dict__
    assert str(copied) == "x"


def test_a_receipt_mismatch_is_an_uncertain_result_carrying_the_receipt():
    error = ReceiptMismatch("digest differs", receipt=RECEIPT)

    assert isinstance(error, ResultUncertain)
    assert error.receipt == RECEIPT
    assert error.raw_response_hash == RECEIPT.raw_response_hash
