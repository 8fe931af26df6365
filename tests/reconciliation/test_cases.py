"""Automatic probes first, then a person's resolution with evidence."""

from __future__ import annotations

import pytest
import requests

from reconciliation.exceptions import NotAllowed, ResolutionRefused
from reconciliation.models import ReconciliationCase
from reconciliation.probes import case_probe
from reconciliation.services import PROBE_DELAYS, case_open, case_resolve
from runs.models import Action
from runs.services import lease_claim, lease_release, protocol, recovery, run_cancel
from sandbox.models import Effect
from tests.factories import (
    approve,
    make_action,
    make_policy,
    make_run,
    make_tenant,
    make_user,
    set_policy,
)
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def make_uncertain(action: Action) -> ReconciliationCase:
    """Drives the protocol's own steps to the state a dropped connection leaves."""
    lease = lease_claim(run_id=action.run_id, owner="test-worker")
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="test-worker")
    recovery.attempt_unknown(
        attempt_pk=attempt.pk,
        lease=lease,
        worker="test-worker",
        error_class="tool_result_uncertain",
        detail="connection dropped",
    )
    recovery.action_uncertain(
        action_pk=action.pk,
        lease=lease,
        worker="test-worker",
        reason="tool_result_uncertain",
        detail="connection dropped",
    )
    lease_release(lease=lease)
    action.refresh_from_db()
    return case_open(action=action)


def approved(tenant, **fields) -> Action:
    action = make_action(make_run(tenant), **fields)
    approve(action, make_user(tenant, "operator"))
    return action


def send_as_the_lost_request_did(sandbox: str, action: Action) -> dict:
    answer = requests.post(
        f"{sandbox}tickets/{action.target}/close",
        timeout=5,
        json={"args": action.args},
        headers={"Idempotency-Key": action.idempotency_key},
    )
    answer.raise_for_status()
    return answer.json()


def probe_until_settled(case: ReconciliationCase) -> ReconciliationCase:
    for _ in PROBE_DELAYS:
        ReconciliationCase.objects.filter(pk=case.pk, status="probing").update(
            next_probe_at=case.opened_at
        )
        case_probe(case_pk=case.pk)
    case.refresh_from_db()
    return case


def test_a_probe_that_finds_the_receipt_by_key_settles_the_case_as_applied(sandbox):
    tenant = make_tenant()
    action = approved(tenant, target="ticket-11")
    case = make_uncertain(action)
    send_as_the_lost_request_did(sandbox, action)
    case = probe_until_settled(case)
    action.refresh_from_db()
    action.run.refresh_from_db()
    assert (case.status, case.resolution, case.resolved_by) == ("resolved", "applied", None)
    assert (action.status, action.receipt.source) == ("succeeded", "query")
    assert action.run.phase == "running"
    assert case.findings[-1]["query"]["intent_digest"] == action.intent_digest


def test_a_probe_that_finds_no_effect_sends_again_with_the_same_key(sandbox, workers):
    tenant = make_tenant()
    action = approved(tenant, target="ticket-12")
    case = probe_until_settled(make_uncertain(action))
    action.refresh_from_db()
    assert (case.resolution, action.status) == ("not_applied", "retry_wait")
    code = workers.run_burst()
    assert code == 0, workers.last_output
    action.refresh_from_db()
    assert action.status == "succeeded"
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1


def test_what_no_probe_can_prove_reaches_the_human_queue_with_every_finding(sandbox):
    tenant = make_tenant()
    action = approved(
        tenant,
        tool="notify.send",
        target="ana@example.com",
        args={"body": "Your refund is on its way."},
    )
    case = probe_until_settled(make_uncertain(action))
    assert (case.status, case.probes, len(case.findings)) == ("open", 3, 3)
    assert all("cannot be queried" in finding["query"] for finding in case.findings)
    assert case.findings[0]["read"]["recipient"] == "ana@example.com"


@pytest.fixture
def open_case(sandbox):
    tenant = make_tenant()
    action = approved(
        tenant,
        tool="notify.send",
        target="bo@example.com",
        args={"body": "Your parcel left the depot."},
    )
    case = probe_until_settled(make_uncertain(action))
    assert case.status == "open"
    return case


def test_applied_needs_evidence_and_a_receipt_must_carry_the_intents_digest(open_case):
    reconciler = make_user(open_case.tenant, "reconciler")
    with pytest.raises(ResolutionRefused, match="evidence is required"):
        case_resolve(case=open_case, user=reconciler, resolution="applied", note="seen")
    with pytest.raises(ResolutionRefused, match="proves another write"):
        case_resolve(
            case=open_case,
            user=reconciler,
            resolution="applied",
            note="seen",
            evidence={"receipt_id": "ntf_1", "intent_digest": "sha256:" + "0" * 64},
        )
    open_case.refresh_from_db()
    assert open_case.status == "open"
    resolved = case_resolve(
        case=open_case,
        user=reconciler,
        resolution="applied",
        note="listed by the notifier",
        evidence={"receipt_id": "ntf_1", "intent_digest": open_case.action.intent_digest},
    )
    action = Action.objects.get(pk=open_case.action_id)
    assert (resolved.status, resolved.resolved_by, action.status) == (
        "resolved",
        reconciler,
        "succeeded",
    )
    assert (action.receipt.source, action.receipt.receipt_id) == ("reconciler", "ntf_1")
    action.run.refresh_from_db()
    assert action.run.phase == "running"


def test_not_applied_on_a_tool_without_dedupe_needs_an_explicit_resend(open_case, workers):
    reconciler = make_user(open_case.tenant, "reconciler")
    with pytest.raises(ResolutionRefused, match="confirm that sending it again is intended"):
        case_resolve(case=open_case, user=reconciler, resolution="not_applied", note="absent")
    case = case_resolve(
        case=open_case,
        user=reconciler,
        resolution="not_applied",
        note="the notifier lists nothing",
        confirm_resend=True,
    )
    assert (case.resend_confirmed, case.action.status) == (True, "retry_wait")
    assert workers.run_burst() == 0
    action = Action.objects.get(pk=case.action_id)
    assert action.status == "succeeded"
    assert Effect.objects.filter(target="bo@example.com").count() == 1


def test_abandon_stops_the_run_as_failed_with_the_reason(open_case):
    case = case_resolve(
        case=open_case,
        user=make_user(open_case.tenant, "reconciler"),
        resolution="abandon",
        note="customer asked us to stop",
    )
    run = case.run
    run.refresh_from_db()
    assert (run.phase, Action.objects.get(pk=case.action_id).status) == ("failed", "failed")
    assert "customer asked us to stop" in run.stop_reason


def test_only_reconcilers_of_the_tenant_resolve(open_case):
    for outsider in (
        make_user(open_case.tenant, "operator"),
        make_user(make_tenant(), "reconciler"),
    ):
        with pytest.raises(NotAllowed):
            case_resolve(case=open_case, user=outsider, resolution="abandon", note="x")


def test_four_eyes_needs_a_second_reconciler_to_confirm_the_same_resolution(sandbox):
    tenant = make_tenant()
    make_policy(tenant, "notify.send", four_eyes=True)
    action = approved(tenant, tool="notify.send", target="cy@example.com", args={"body": "Hello"})
    case = probe_until_settled(make_uncertain(action))
    first, second = make_user(tenant, "reconciler"), make_user(tenant, "reconciler")
    case = case_resolve(case=case, user=first, resolution="abandon", note="duplicate order")
    assert case.status == "awaiting_second"
    with pytest.raises(NotAllowed, match="another reconciler"):
        case_resolve(case=case, user=first, resolution="abandon", note="again")
    with pytest.raises(ResolutionRefused, match="confirm the proposed resolution"):
        case_resolve(
            case=case, user=second, resolution="not_applied", note="no", confirm_resend=True
        )
    case = case_resolve(case=case, user=second, resolution="abandon", note="agreed")
    assert (case.status, case.proposed_by, case.resolved_by) == ("resolved", first, second)


def _open_notify_case(tenant) -> ReconciliationCase:
    action = approved(tenant, tool="notify.send", target="cy@example.com", args={"body": "Hi"})
    return probe_until_settled(make_uncertain(action))


def test_a_case_opened_under_four_eyes_keeps_them_when_the_policy_is_relaxed(sandbox):
    tenant = make_tenant()
    set_policy(tenant, "notify.send", four_eyes=True)
    case = _open_notify_case(tenant)
    assert (case.status, case.four_eyes_at_open) == ("open", True)
    proposer, second = make_user(tenant, "reconciler"), make_user(tenant, "reconciler")
    set_policy(tenant, "notify.send", four_eyes=False)  # relaxed after the case opened

    case = case_resolve(case=case, user=proposer, resolution="abandon", note="duplicate")
    assert case.status == "awaiting_second"  # a proposal, not a resolution
    with pytest.raises(NotAllowed, match="another reconciler"):
        case_resolve(case=case, user=proposer, resolution="abandon", note="alone")
    case.refresh_from_db()
    assert (case.status, case.resolved_by) == ("awaiting_second", None)
    case = case_resolve(case=case, user=second, resolution="abandon", note="agreed")
    assert (case.status, case.proposed_by, case.resolved_by) == ("resolved", proposer, second)


def test_a_proposal_made_under_four_eyes_is_not_resolved_alone_after_a_relaxation(sandbox):
    tenant = make_tenant()
    set_policy(tenant, "notify.send", four_eyes=True)
    case = _open_notify_case(tenant)
    proposer = make_user(tenant, "reconciler")
    case = case_resolve(case=case, user=proposer, resolution="abandon", note="duplicate")
    set_policy(tenant, "notify.send", four_eyes=False)

    with pytest.raises(NotAllowed, match="another reconciler"):
        case_resolve(case=case, user=proposer, resolution="abandon", note="alone now")
    case.refresh_from_db()
    assert case.status == "awaiting_second"


def test_a_policy_tightened_after_the_case_opened_applies_at_once(sandbox):
    # Four eyes only ever adds a person: the stricter of the frozen and the live rule holds.
    tenant = make_tenant()
    case = _open_notify_case(tenant)
    assert case.four_eyes_at_open is False
    set_policy(tenant, "notify.send", four_eyes=True)

    proposer = make_user(tenant, "reconciler")
    case = case_resolve(case=case, user=proposer, resolution="abandon", note="duplicate")
    assert case.status == "awaiting_second"


def test_compensate_records_the_receipt_and_proposes_the_undo_for_approval(sandbox, workers):
    tenant = make_tenant()
    action = approved(
        tenant,
        tool="payment.charge",
        target="cus_9",
        action_id="charge",
        args={"amount_cents": 1200, "currency": "EUR"},
    )
    case = make_uncertain(action)
    ReconciliationCase.objects.filter(pk=case.pk).update(status="open")
    charge = requests.post(
        sandbox + "payments/charges",
        timeout=5,
        headers={"Idempotency-Key": action.idempotency_key},
        json={"customer": "cus_9", "amount_cents": 1200, "currency": "EUR"},
    )
    receipt = charge.json()
    case.refresh_from_db()
    case_resolve(
        case=case,
        user=make_user(tenant, "reconciler"),
        resolution="compensate",
        note="charged twice by the customer's bank retry",
        evidence=receipt,
    )
    undo = Action.objects.get(run=action.run, action_id="undo-charge")
    assert (undo.tool, undo.target, undo.args, undo.status) == (
        "payment.refund",
        receipt["receipt_id"],
        {"amount_cents": 1200},
        "waiting_approval",
    )
    approve(undo, make_user(tenant, "operator"))
    assert workers.run_burst() == 0
    wait_until(lambda: Effect.objects.filter(tool="payment.refund").count() == 1, timeout=5)


def test_a_write_resolved_not_applied_after_its_run_was_cancelled_is_never_sent(open_case, workers):
    run = open_case.action.run
    report = run_cancel(run=run, reason="the customer withdrew", actor="ops")
    assert [entry["action_id"] for entry in report["in_doubt"]] == [open_case.action.action_id]

    case = case_resolve(
        case=open_case,
        user=make_user(open_case.tenant, "reconciler"),
        resolution="not_applied",
        note="the notifier lists nothing",
        confirm_resend=True,
    )

    assert workers.run_burst() == 0
    action = Action.objects.get(pk=case.action_id)
    run.refresh_from_db()
    assert (case.status, action.status, run.phase) == ("resolved", "cancelled", "cancelled")
    assert action.attempts.count() == 1
    assert Effect.objects.filter(target="bo@example.com").count() == 0
    assert run.events.filter(type="action.cancelled", action=action).exists()
