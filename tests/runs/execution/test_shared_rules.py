"""The single and the batch write paths apply one rule each, with one answer.

Each case is fed to both: an approved bench.noop write begun (or about to be) by
protocol.attempt_begin and receipt_record one by one, and by batch.attempts_begin and
receipts_record together. A receipt that proves another write is refused with the same
ReceiptRefused; a run past its deadline or out of budget sends nothing on either path and
ends in the same phase.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.exceptions import ReceiptRefused
from runs.execution import batch
from runs.execution.drain import process_claims
from runs.execution.worker import claim_ready
from runs.models import Action, Attempt, Receipt, Run
from runs.services import protocol
from runs.tools.calls import ToolReceipt
from tests.runs.execution.test_batch import approved_noops, batch_steps

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "rules-worker"


def _receipt_for(action: Action) -> ToolReceipt:
    return ToolReceipt(
        idempotency_key=action.idempotency_key,
        intent_digest=action.intent_digest,
        receipt_id="noop-receipt-1",
        target_version=None,
        status="ok",
        raw_response_hash="sha256:" + "0" * 64,
    )


RECEIPT_FAULTS = {
    "another intent's digest": (
        lambda receipt: replace(receipt, intent_digest="sha256:" + "f" * 64),
        "receipt noop-receipt-1 carries digest sha256:ffff",
    ),
    "another key": (
        lambda receipt: replace(receipt, idempotency_key="someone-elses-key"),
        "receipt noop-receipt-1 is under another key: it cannot prove action close-ticket",
    ),
}


@pytest.mark.parametrize("fault", RECEIPT_FAULTS)
def test_a_receipt_that_proves_another_write_is_refused_alike_by_both_paths(noop_tool, fault):
    spoil, expected = RECEIPT_FAULTS[fault]
    single, together = approved_noops(2)
    claims = dict(claim_ready(worker=WORKER))

    attempt = protocol.attempt_begin(action_pk=single.pk, lease=claims[single.pk], worker=WORKER)
    assert attempt is not None
    with pytest.raises(ReceiptRefused) as one_by_one:
        protocol.receipt_record(
            action_pk=single.pk,
            lease=claims[single.pk],
            receipt=spoil(_receipt_for(single)),
            source=Receipt.Source.RESPONSE,
            worker=WORKER,
            attempt_pk=attempt.pk,
        )

    begun = batch.attempts_begin(batch_steps([(together.pk, claims[together.pk])]), worker=WORKER)
    assert [step.action.pk for step in begun.begun] == [together.pk]
    begun.begun[0].receipt = spoil(_receipt_for(together))
    with pytest.raises(ReceiptRefused) as batched:
        batch.receipts_record(begun.begun, worker=WORKER)

    assert str(one_by_one.value) == str(batched.value)
    assert str(one_by_one.value).startswith(expected)
    assert one_by_one.value.code == "receipt_refused"
    # Neither kept the receipt as the write's proof: both are still out, as sent.
    assert not Receipt.objects.filter(action__in=[single, together]).exists()
    assert set(
        Action.objects.filter(pk__in=[single.pk, together.pk]).values_list("status", flat=True)
    ) == {"in_flight"}


LIMITS = {
    "deadline passed": (
        lambda run_ids: Run.objects.filter(pk__in=run_ids).update(
            deadline=timezone.now() - timedelta(seconds=1)
        ),
        "deadline_exceeded",
    ),
    "budget spent": (
        lambda run_ids: Run.objects.filter(pk__in=run_ids).update(budget_limit=1, budget_used=1),
        "budget_exhausted",
    ),
}


@pytest.mark.parametrize("limit", LIMITS)
def test_a_run_at_its_limit_sends_nothing_on_either_path_and_stops_alike(noop_tool, limit):
    reach, phase = LIMITS[limit]
    single, together = approved_noops(2)
    claims = dict(claim_ready(worker=WORKER))
    reach([single.run_id, together.run_id])
    before = Run.objects.get(pk=together.run_id).phase

    assert (
        protocol.attempt_begin(action_pk=single.pk, lease=claims[single.pk], worker=WORKER) is None
    )

    begun = batch.attempts_begin(batch_steps([(together.pk, claims[together.pk])]), worker=WORKER)
    assert begun.begun == []
    assert [step.action.pk for step in begun.left] == [together.pk]
    # The batch wrote nothing and leaves the stop to the single path, which the drain
    # hands the left steps to.
    assert Run.objects.get(pk=together.run_id).phase == before
    assert process_claims([(together.pk, claims[together.pk])], worker=WORKER) == []

    assert not Attempt.objects.filter(action__in=[single, together]).exists()
    for action in (single, together):
        run = Run.objects.get(pk=action.run_id)
        assert run.phase == phase
        stop = run.events.get(type=f"run.{phase}")
        assert (stop.actor, stop.payload["report"]["not_started"] != []) == (WORKER, True)
        assert run.stop_reason == limit
        assert Action.objects.get(pk=action.pk).status == "cancelled"
