"""Reaching action states through the real protocol steps, as a worker would, without I/O."""

from __future__ import annotations

import hashlib

from reconciliation.services import case_open
from runs.models import Action
from runs.services import lease_claim, lease_release, protocol, recovery
from runs.tools.calls import ToolReceipt

WORKER = "tests-worker"


def content_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def execute_with_receipt(action: Action, *, receipt_id: str = "rcpt-1") -> Action:
    """An approved action sent and answered: attempt, receipt, succeeded."""
    lease = lease_claim(run_id=action.run_id, owner=WORKER)
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=WORKER)
    assert attempt is not None
    protocol.receipt_record(
        action_pk=action.pk,
        lease=lease,
        receipt=ToolReceipt(
            idempotency_key=action.idempotency_key,
            intent_digest=action.intent_digest,
            receipt_id=receipt_id,
            target_version=2,
            status="closed",
            raw_response_hash=content_hash(receipt_id),
        ),
        source="response",
        worker=WORKER,
        attempt_pk=attempt.pk,
    )
    lease_release(lease=lease)
    action.refresh_from_db()
    return action


def make_uncertain_with_case(
    action: Action,
    *,
    reason: str = "connection_dropped",
    detail: str = "the connection closed after sending",
):
    """An approved action whose send ended unknown (for reason, in the transport's words
    detail) and that nothing could settle."""
    lease = lease_claim(run_id=action.run_id, owner=WORKER)
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=WORKER)
    assert attempt is not None
    recovery.action_uncertain(
        action_pk=action.pk,
        lease=lease,
        reason=reason,
        detail=detail,
        worker=WORKER,
    )
    lease_release(lease=lease)
    action.refresh_from_db()
    return case_open(action=action)
