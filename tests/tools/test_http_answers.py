"""Answers the sandbox never gives, from a stand-in external service (a real local server)."""

from __future__ import annotations

import json

import pytest

from control.foundation.canonical import content_hash, intent_digest
from runs.tools.calls import ToolCall
from runs.tools.errors import (
    InvalidArguments,
    PermissionDenied,
    ReceiptMismatch,
    ResultUncertain,
    TransientError,
)
from runs.tools.http import HttpAnswer, encode_form, retry_after_seconds
from runs.tools.registry import get_tool

TIMEOUT = (2.0, 2.0)
ARGS = {"resolution": "fixed"}
CALL = ToolCall(
    tool="ticket.close",
    target="ticket-7",
    args=ARGS,
    idempotency_key="run-1:close:ticket-7:v1",
    intent_digest=intent_digest(tool="ticket.close", target="ticket-7", args=ARGS),
)
NOTIFY_ARGS = {"body": "hi"}
NOTIFY_CALL = ToolCall(
    tool="notify.send",
    target="ops@example.com",
    args=NOTIFY_ARGS,
    idempotency_key="run-1:notify:ops@example.com:v1",
    intent_digest=intent_digest(tool="notify.send", target="ops@example.com", args=NOTIFY_ARGS),
)


def receipt_for(call: ToolCall, **changes: object) -> dict[str, object]:
    return {
        "idempotency_key": call.idempotency_key,
        "intent_digest": call.intent_digest,
        "receipt_id": "tkc_1",
        "target_version": 2,
        "status": "closed",
        **changes,
    }


def test_the_adapter_sends_the_frozen_intent_with_its_key(external):
    external.answer(201, receipt_for(CALL))

    receipt = get_tool("ticket.close").execute(CALL, timeout=TIMEOUT)

    method, path, headers, body = external.requests[0]
    assert (method, path) == ("POST", "/sandbox/tickets/ticket-7/close")
    assert headers["Idempotency-Key"] == CALL.idempotency_key
    assert json.loads(body) == {"args": ARGS}
    assert receipt.raw_response_hash == content_hash(external.body)


def test_a_receipt_for_another_intent_is_a_mismatch_carrying_that_receipt(external):
    external.answer(201, receipt_for(CALL, intent_digest="sha256:" + "0" * 64))

    with pytest.raises(ReceiptMismatch) as mismatch:
        get_tool("ticket.close").execute(CALL, timeout=TIMEOUT)

    assert mismatch.value.error_class == "receipt_digest_mismatch"
    assert isinstance(mismatch.value, ResultUncertain)
    assert mismatch.value.receipt.intent_digest == "sha256:" + "0" * 64


def test_a_receipt_for_another_key_is_a_mismatch(external):
    external.answer(200, receipt_for(CALL, idempotency_key="someone-else"))

    with pytest.raises(ReceiptMismatch):
        get_tool("ticket.close").execute(CALL, timeout=TIMEOUT)


@pytest.mark.parametrize(
    "body",
    [
        {"status": "closed"},
        {"receipt_id": "tkc_1"},
        [1, 2],
        b'{"idempotency_key": "a", "idempotency_key": "b"}',
        b"",
    ],
)
def test_a_2xx_without_a_usable_receipt_is_uncertain(external, body):
    external.answer(200, body)

    with pytest.raises(ResultUncertain) as uncertain:
        get_tool("ticket.close").execute(CALL, timeout=TIMEOUT)

    assert type(uncertain.value) is ResultUncertain
    assert uncertain.value.raw_response_hash == content_hash(external.body)


@pytest.mark.parametrize(
    ("status", "error", "tool_call"),
    [
        (400, InvalidArguments, CALL),
        (401, PermissionDenied, CALL),
        (403, PermissionDenied, CALL),
        (422, InvalidArguments, CALL),
        (500, TransientError, CALL),
        (503, TransientError, CALL),
        (502, TransientError, CALL),
        (504, TransientError, CALL),
        # The adapter only classifies; whether a resend is safe is the tool's effect class.
        (502, TransientError, NOTIFY_CALL),
        (504, TransientError, NOTIFY_CALL),
        (503, TransientError, NOTIFY_CALL),
        (302, ResultUncertain, CALL),
    ],
)
def test_statuses_are_classified(external, status, error, tool_call):
    external.answer(status, {"type": "whatever", "detail": "said the server"})

    with pytest.raises(error) as raised:
        get_tool(tool_call.tool).execute(tool_call, timeout=TIMEOUT)

    assert type(raised.value) is error
    assert raised.value.http_status == status


def test_a_query_answered_by_a_non_sandbox_404_proves_nothing(external):
    external.answer(404, b"<html>Not Found</html>", **{"Content-Type": "text/html"})

    with pytest.raises(TransientError):
        get_tool("ticket.close").query(CALL.idempotency_key, timeout=TIMEOUT)


def test_a_query_receipt_for_another_key_proves_nothing(external):
    external.answer(200, receipt_for(CALL, idempotency_key="someone-else"))

    with pytest.raises(TransientError):
        get_tool("ticket.close").query(CALL.idempotency_key, timeout=TIMEOUT)


def test_a_query_escapes_the_key_into_one_path_segment(external):
    external.answer(200, receipt_for(CALL, idempotency_key="run/1:a b"))

    get_tool("ticket.close").query("run/1:a b", timeout=TIMEOUT)

    assert external.requests[0][1] == "/sandbox/receipts/run%2F1%3Aa%20b"


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("-3") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert retry_after_seconds("Fri, 01 Jan 2100 00:00:00 GMT") / (365 * 86400) > 50


@pytest.mark.parametrize(
    ("tool", "error", "unknown"),
    [
        # The system answered: it may have committed first. Only a deduping tool resends.
        ("notify.send", TransientError("HTTP 503", http_status=503), True),
        ("notify.send", TransientError("HTTP 408", http_status=408), True),
        ("notify.send", TransientError("HTTP 429", http_status=429), True),
        ("ticket.close", TransientError("HTTP 503", http_status=503), False),
        ("payment.charge", TransientError("HTTP 500", http_status=500), False),
        # Never answered (connection refused): provably not sent, any tool may retry.
        ("notify.send", TransientError("connection refused"), False),
        ("ticket.close", ResultUncertain("connection dropped after sending"), True),
        ("notify.send", InvalidArguments("HTTP 400", http_status=400), False),
    ],
)
def test_whether_a_failed_write_may_have_applied_follows_the_tools_effect_class(
    tool, error, unknown
):
    assert get_tool(tool).outcome_unknown_after(error) is unknown


def test_a_form_body_nests_as_stripe_reads_it():
    body = {
        "customer": "cus_42",
        "amount": 1250,
        "capture": False,
        "description": None,
        "metadata": {"order": "7", "note": "a&b=c"},
        "items": [{"price": "p_1", "quantity": 2}, {"price": "p_2"}],
    }
    assert encode_form(body) == (
        b"customer=cus_42&amount=1250&capture=false"
        b"&metadata%5Border%5D=7&metadata%5Bnote%5D=a%26b%3Dc"
        b"&items%5B0%5D%5Bprice%5D=p_1&items%5B0%5D%5Bquantity%5D=2&items%5B1%5D%5Bprice%5D=p_2"
    )


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b'{"type": "not_found", "detail": "no ticket 9"}', ("not_found", "no ticket 9")),
        (
            b'{"error": {"type": "card_error", "code": "card_declined", '
            b'"message": "Your card was declined."}}',
            ("card_error", "Your card was declined."),
        ),
        (b'{"error": {"code": "amount_too_small"}}', ("amount_too_small", "")),
        (b'{"message": "Validation Failed"}', (None, "Validation Failed")),
        (b'{"error": "invalid_grant"}', (None, "invalid_grant")),
        (b"<html>Bad Gateway</html>" + b"x" * 400, (None, "<html>Bad Gateway</html>" + "x" * 276)),
    ],
)
def test_an_error_body_keeps_the_upstreams_own_message(body, problem):
    answer = HttpAnswer(status=400, headers={}, body=body)
    assert answer.problem() == problem
    assert answer.problem(redact=lambda text: text.replace("declined", "[x]"))[1] == (
        problem[1].replace("declined", "[x]")
    )
