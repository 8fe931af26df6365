"""Ledger states reached through the real protocol steps, as a worker would, without I/O."""

from __future__ import annotations

import hashlib

from control.models import Tenant
from reconciliation.services import case_open
from runs.models import Action, Receipt
from runs.services import lease_claim, lease_release, protocol, recovery
from tests.api.support import execute_with_receipt
from tests.factories import approve, make_action, make_run
from tests.tampering import as_database_owner

WORKER = "tests-ledger-worker"


def content_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def approved_action(tenant: Tenant, approver, *, target: str = "ticket-7") -> Action:
    """A frozen, approved ticket.close in a run of its own. Same target, same digest."""
    action = make_action(make_run(tenant), target=target)
    approve(action, approver)
    return action


def send_with_receipt(action: Action, *, receipt_id: str, echoed_key: str | None = None) -> Action:
    """Sent and answered. `echoed_key` is a key other than the action's own on its receipt:
    the protocol refuses such a receipt, so it is written over the stored one afterwards, as
    tampering or a row from an older version would leave it; the ledger must show it."""
    execute_with_receipt(action, receipt_id=receipt_id)
    if echoed_key:
        with as_database_owner():
            Receipt.objects.filter(action=action).update(idempotency_key=echoed_key)
    action.refresh_from_db()
    return action


def send_without_answer(action: Action) -> Action:
    """Sent, then the connection dropped: uncertain, no receipt, a case opened."""
    lease = lease_claim(run_id=action.run_id, owner=WORKER)
    attempt = protocol.attempt_begin(action_pk=action.pk, lease=lease, worker=WORKER)
    assert attempt is not None
    recovery.action_uncertain(
        action_pk=action.pk,
        lease=lease,
        reason="connection_dropped",
        detail="the connection closed after sending",
        worker=WORKER,
    )
    lease_release(lease=lease)
    action.refresh_from_db()
    case_open(action=action)
    return action
