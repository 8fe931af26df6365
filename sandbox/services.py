"""Every change the sandbox's external systems make, each in one transaction.

Keyed writes follow Stripe's idempotency semantics: the key is inserted first, under its
unique constraint, in the same transaction as the business change and its ledger row. A
concurrent request with the same key waits on that insert, then replays the stored receipt
(same intent) or is refused (different intent). A refused business change rolls the key
back with it, so nothing is stored for a request that changed nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from sandbox.digest import intent_digest
from sandbox.exceptions import Conflict, IdempotencyConflict, NotFound
from sandbox.models import (
    Charge,
    Effect,
    FaultPlan,
    IdempotencyRecord,
    Notification,
    Refund,
    Ticket,
)

SANDBOX_DATABASE = "sandbox"
TICKET_COUNT = 100


@dataclass(frozen=True)
class Outcome:
    receipt: dict[str, Any]
    replayed: bool


@dataclass(frozen=True)
class _Effect:
    receipt_id: str
    target_version: int | None
    status: str


def _receipt_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _keyed_write(
    *, key: str, tool: str, target: str, args: dict[str, Any], perform: Callable[[], _Effect]
) -> Outcome:
    digest = intent_digest(tool=tool, target=target, args=args)
    with transaction.atomic(using=SANDBOX_DATABASE):
        try:
            with transaction.atomic(using=SANDBOX_DATABASE):
                record = IdempotencyRecord.objects.create(key=key, tool=tool, intent_digest=digest)
        except IntegrityError:
            # The key's first request committed (we waited for it if it was in flight).
            return _replay(key=key, digest=digest)
        effect = perform()
        receipt = {
            "idempotency_key": key,
            "intent_digest": digest,
            "receipt_id": effect.receipt_id,
            "target_version": effect.target_version,
            "status": effect.status,
        }
        IdempotencyRecord.objects.filter(pk=record.pk).update(receipt=receipt)
        Effect.objects.create(
            tool=tool, target=target, idempotency_key=key, receipt_id=effect.receipt_id
        )
    return Outcome(receipt=receipt, replayed=False)


def _replay(*, key: str, digest: str) -> Outcome:
    record = IdempotencyRecord.objects.get(key=key)
    if record.intent_digest != digest:
        raise IdempotencyConflict(
            f"Idempotency-Key {key!r} was first used for a different intent",
            stored_intent_digest=record.intent_digest,
            intent_digest=digest,
        )
    return Outcome(receipt=record.receipt, replayed=True)


def ticket_close(*, ticket_id: str, idempotency_key: str, args: dict[str, Any]) -> Outcome:
    def perform() -> _Effect:
        ticket = Ticket.objects.select_for_update().filter(id=ticket_id).first()
        if ticket is None:
            raise NotFound(f"no ticket {ticket_id!r}")
        if ticket.status == Ticket.Status.CLOSED:
            raise Conflict(f"{ticket_id} is already closed", type="already_closed")
        ticket.status = Ticket.Status.CLOSED
        ticket.version += 1
        ticket.updated_at = timezone.now()
        ticket.save(update_fields=["status", "version", "updated_at"])
        return _Effect(_receipt_id("tkc"), ticket.version, "closed")

    return _keyed_write(
        key=idempotency_key, tool="ticket.close", target=ticket_id, args=args, perform=perform
    )


def notification_send(*, recipient: str, body: str) -> Outcome:
    """No idempotency at all: every call sends again (that is the notifier's point)."""
    receipt_id = _receipt_id("ntf")
    with transaction.atomic(using=SANDBOX_DATABASE):
        Notification.objects.create(recipient=recipient, body=body, receipt_id=receipt_id)
        Effect.objects.create(tool="notify.send", target=recipient, receipt_id=receipt_id)
    receipt = {
        "idempotency_key": None,
        "intent_digest": intent_digest(tool="notify.send", target=recipient, args={"body": body}),
        "receipt_id": receipt_id,
        "target_version": None,
        "status": "sent",
    }
    return Outcome(receipt=receipt, replayed=False)


def charge_create(
    *,
    idempotency_key: str,
    customer: str,
    amount_cents: int,
    currency: str,
    metadata: dict[str, str] | None = None,
) -> Outcome:
    def perform() -> _Effect:
        charge = Charge.objects.create(
            receipt_id=_receipt_id("ch"),
            customer=customer,
            amount_cents=amount_cents,
            currency=currency,
            metadata=metadata or {},
        )
        return _Effect(charge.receipt_id, None, "charged")

    return _keyed_write(
        key=idempotency_key,
        tool="payment.charge",
        target=customer,
        args={"amount_cents": amount_cents, "currency": currency},
        perform=perform,
    )


def refund_create(*, idempotency_key: str, charge_id: str, amount_cents: int) -> Outcome:
    def perform() -> _Effect:
        charge = Charge.objects.select_for_update().filter(receipt_id=charge_id).first()
        if charge is None:
            raise Conflict(f"no charge {charge_id!r} to refund", type="charge_not_found")
        refundable = charge.amount_cents - charge.refunded_cents
        if amount_cents > refundable:
            raise Conflict(
                f"refund of {amount_cents} exceeds the {refundable} left on {charge_id}",
                type="refund_exceeds_charge",
            )
        refund = Refund.objects.create(
            receipt_id=_receipt_id("re"), charge=charge, amount_cents=amount_cents
        )
        Charge.objects.filter(pk=charge.pk).update(
            refunded_cents=F("refunded_cents") + amount_cents, version=F("version") + 1
        )
        return _Effect(refund.receipt_id, charge.version + 1, "refunded")

    return _keyed_write(
        key=idempotency_key,
        tool="payment.refund",
        target=charge_id,
        args={"amount_cents": amount_cents},
        perform=perform,
    )


def sandbox_reset() -> dict[str, int]:
    """Tickets 1..100 open at version 1, every other table empty; returns rows removed."""
    with transaction.atomic(using=SANDBOX_DATABASE):
        removed: dict[str, int] = {}
        # Refunds before the charges they protect.
        for model in (Effect, IdempotencyRecord, Notification, Refund, Charge, FaultPlan, Ticket):
            removed[str(model._meta.verbose_name_plural)] = model.objects.all().delete()[0]
        Ticket.objects.bulk_create(
            Ticket(id=f"ticket-{number}") for number in range(1, TICKET_COUNT + 1)
        )
    return removed
