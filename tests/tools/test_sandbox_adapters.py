"""The sandbox adapters against a real server (live_server) with real injected faults."""

from __future__ import annotations

import time

import pytest

from control.foundation.canonical import content_hash, intent_digest
from runs.tools.calls import ToolCall
from runs.tools.errors import (
    BusinessRejection,
    IdempotencyConflict,
    InvalidArguments,
    ResultUncertain,
    TransientError,
    UnsupportedTool,
)
from runs.tools.registry import get_tool
from sandbox.faults import MALFORMED_BODY
from tests.sandbox.support import effects, set_fault

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

TIMEOUT = (2.0, 5.0)


def call_for(tool: str, target: str, args: dict, *, key: str | None = None) -> ToolCall:
    return ToolCall(
        tool=tool,
        target=target,
        args=args,
        idempotency_key=key or f"run-1:{tool}:{target}:v1",
        intent_digest=intent_digest(tool=tool, target=target, args=args),
    )


def close_call(ticket_id: str = "ticket-7", **kwargs) -> ToolCall:
    return call_for("ticket.close", ticket_id, {"resolution": "fixed"}, **kwargs)


def test_closing_a_ticket_returns_the_receipt_for_exactly_this_intent(sandbox_url):
    call = close_call()

    receipt = get_tool("ticket.close").execute(call, timeout=TIMEOUT)

    assert receipt.idempotency_key == call.idempotency_key
    assert receipt.intent_digest == call.intent_digest
    assert (receipt.status, receipt.target_version) == ("closed", 2)
    assert receipt.raw_response_hash.startswith("sha256:")
    # Replays and queries answer the very same bytes, so even the raw hash matches.
    assert get_tool("ticket.close").query(call.idempotency_key, timeout=TIMEOUT) == receipt


def test_executing_the_same_call_twice_replays_one_effect(sandbox_url):
    tool = get_tool("ticket.close")

    first = tool.execute(close_call(), timeout=TIMEOUT)
    second = tool.execute(close_call(), timeout=TIMEOUT)

    assert second.receipt_id == first.receipt_id
    assert len(effects(sandbox_url, tool="ticket.close")) == 1


def test_commit_then_drop_is_uncertain_and_the_effect_is_committed(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="commit_then_drop")
    call = close_call()

    with pytest.raises(ResultUncertain) as uncertain:
        get_tool("ticket.close").execute(call, timeout=TIMEOUT)

    assert uncertain.value.error_class == "tool_result_uncertain"
    assert [effect["idempotency_key"] for effect in effects(sandbox_url)] == [call.idempotency_key]


def test_a_query_by_key_finds_the_receipt_after_commit_then_drop(sandbox_url):
    set_fault(sandbox_url, tool="payment.charge", fault="commit_then_drop")
    tool = get_tool("payment.charge")
    call = call_for("payment.charge", "cus_42", {"amount_cents": 1250, "currency": "EUR"})
    with pytest.raises(ResultUncertain):
        tool.execute(call, timeout=TIMEOUT)

    receipt = tool.query(call.idempotency_key, timeout=TIMEOUT)

    assert receipt is not None
    assert receipt.intent_digest == call.intent_digest
    assert receipt.status == "charged"
    assert [effect["receipt_id"] for effect in effects(sandbox_url)] == [receipt.receipt_id]


def test_a_query_for_a_key_never_used_finds_nothing(sandbox_url):
    assert get_tool("ticket.close").query("run-1:never:ticket-1:v1", timeout=TIMEOUT) is None


def test_commit_then_malformed_is_uncertain_with_the_body_hash_as_evidence(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="commit_then_malformed")

    with pytest.raises(ResultUncertain) as uncertain:
        get_tool("ticket.close").execute(close_call(), timeout=TIMEOUT)

    assert uncertain.value.raw_response_hash == content_hash(MALFORMED_BODY)
    assert uncertain.value.http_status == 200
    assert len(effects(sandbox_url)) == 1


def test_commit_then_hang_past_the_read_timeout_is_uncertain(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="commit_then_hang:1")

    with pytest.raises(ResultUncertain):
        get_tool("ticket.close").execute(close_call(), timeout=(2.0, 0.3))

    assert len(effects(sandbox_url)) == 1
    time.sleep(1)  # let the hanging request finish before the database is flushed


def test_a_rate_limit_is_transient_with_its_retry_after(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="rate_limit:7")

    with pytest.raises(TransientError) as transient:
        get_tool("ticket.close").execute(close_call(), timeout=TIMEOUT)

    assert transient.value.retry_after == 7.0
    assert transient.value.http_status == 429
    assert effects(sandbox_url) == []


def test_fail_before_commit_is_transient_and_leaves_no_effect(sandbox_url):
    set_fault(sandbox_url, tool="notify.send", fault="fail_before_commit")

    with pytest.raises(TransientError) as transient:
        get_tool("notify.send").execute(
            call_for("notify.send", "ops@example.com", {"body": "hi"}), timeout=TIMEOUT
        )

    assert transient.value.retry_after is None
    assert transient.value.http_status == 500
    assert effects(sandbox_url) == []


def test_a_refused_connection_is_transient(unreachable_sandbox):
    with pytest.raises(TransientError, match="could not connect"):
        get_tool("ticket.close").execute(close_call(), timeout=TIMEOUT)


def test_a_slow_sandbox_within_the_timeout_still_answers(sandbox_url):
    set_fault(sandbox_url, tool="ticket.close", fault="slow:200")

    receipt = get_tool("ticket.close").execute(close_call(), timeout=TIMEOUT)

    assert receipt.status == "closed"


def test_closing_a_closed_ticket_under_a_new_key_is_a_business_rejection(sandbox_url):
    tool = get_tool("ticket.close")
    tool.execute(close_call(key="key-1"), timeout=TIMEOUT)

    with pytest.raises(BusinessRejection, match="already_closed"):
        tool.execute(close_call(key="key-2"), timeout=TIMEOUT)


def test_reusing_a_key_for_other_arguments_is_an_idempotency_conflict(sandbox_url):
    tool = get_tool("ticket.close")
    tool.execute(close_call(key="key-1"), timeout=TIMEOUT)
    other = call_for("ticket.close", "ticket-7", {"resolution": "duplicate"}, key="key-1")

    with pytest.raises(IdempotencyConflict):
        tool.execute(other, timeout=TIMEOUT)

    assert len(effects(sandbox_url)) == 1


def test_an_unknown_ticket_is_invalid_arguments(sandbox_url):
    with pytest.raises(InvalidArguments) as invalid:
        get_tool("ticket.close").execute(close_call("ticket-999"), timeout=TIMEOUT)

    assert (invalid.value.field, invalid.value.http_status) == ("target", 404)


def test_reading_a_ticket_tells_whether_closing_is_already_satisfied(sandbox_url):
    tool = get_tool("ticket.close")
    before = tool.read("ticket-7", timeout=TIMEOUT)
    tool.execute(close_call(), timeout=TIMEOUT)
    after = tool.read("ticket-7", timeout=TIMEOUT)

    assert before == {"id": "ticket-7", "status": "open", "version": 1}
    assert not tool.is_satisfied(target="ticket-7", args={}, state=before)
    assert tool.is_satisfied(target="ticket-7", args={}, state=after)


def test_ticket_lookup_returns_a_read_receipt_of_the_version_seen(sandbox_url):
    call = call_for("ticket.lookup", "ticket-3", {})

    receipt = get_tool("ticket.lookup").execute(call, timeout=TIMEOUT)

    assert receipt.receipt_id == "ticket-3@v1"
    assert (receipt.status, receipt.target_version) == ("open", 1)
    assert receipt.intent_digest == call.intent_digest
    assert receipt.idempotency_key is None


def test_a_rate_limited_read_is_transient(sandbox_url):
    set_fault(sandbox_url, tool="ticket.lookup", fault="rate_limit:2")

    with pytest.raises(TransientError) as transient:
        get_tool("ticket.lookup").execute(
            call_for("ticket.lookup", "ticket-3", {}), timeout=TIMEOUT
        )

    assert transient.value.retry_after == 2.0


def test_a_dropped_read_is_transient_not_uncertain(sandbox_url):
    set_fault(sandbox_url, tool="ticket.lookup", fault="commit_then_drop")

    with pytest.raises(TransientError):
        get_tool("ticket.lookup").execute(
            call_for("ticket.lookup", "ticket-3", {}), timeout=TIMEOUT
        )


def test_notify_sends_again_on_every_execute_and_lists_what_was_sent(sandbox_url):
    tool = get_tool("notify.send")
    call = call_for("notify.send", "ops@example.com", {"body": "deploy done"})

    first = tool.execute(call, timeout=TIMEOUT)
    second = tool.execute(call, timeout=TIMEOUT)
    state = tool.read("ops@example.com", timeout=TIMEOUT)

    assert first.receipt_id != second.receipt_id
    assert first.idempotency_key is None
    assert [item["receipt_id"] for item in state["notifications"]] == [
        first.receipt_id,
        second.receipt_id,
    ]
    assert not tool.is_satisfied(target="ops@example.com", args=call.args, state=state)


def test_a_dropped_notification_is_uncertain_and_cannot_be_queried(sandbox_url):
    set_fault(sandbox_url, tool="notify.send", fault="commit_then_drop")
    tool = get_tool("notify.send")

    with pytest.raises(ResultUncertain):
        tool.execute(call_for("notify.send", "ops@example.com", {"body": "hi"}), timeout=TIMEOUT)

    with pytest.raises(UnsupportedTool):
        tool.query("any", timeout=TIMEOUT)
    assert len(tool.read("ops@example.com", timeout=TIMEOUT)["notifications"]) == 1


def test_a_charge_is_compensated_by_a_refund_within_its_amount(sandbox_url):
    charge = get_tool("payment.charge")
    refund = get_tool("payment.refund")
    charge_call = call_for("payment.charge", "cus_42", {"amount_cents": 900, "currency": "EUR"})
    receipt = charge.execute(charge_call, timeout=TIMEOUT)

    target, args = charge.compensation_call(receipt=receipt, args=charge_call.args)
    refunded = refund.execute(call_for("payment.refund", target, args), timeout=TIMEOUT)

    assert (refunded.status, refunded.target_version) == ("refunded", 2)
    assert refund.read(target, timeout=TIMEOUT)["refunded_cents"] == 900
    with pytest.raises(BusinessRejection, match="refund_exceeds_charge"):
        refund.execute(
            call_for("payment.refund", target, {"amount_cents": 1}, key="other"), timeout=TIMEOUT
        )
