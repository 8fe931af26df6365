"""The sandbox's reads; views serialize what these return."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from sandbox.models import Charge, Effect, FaultPlan, IdempotencyRecord, Notification, Ticket


def ticket_get(*, ticket_id: str) -> Ticket | None:
    return Ticket.objects.filter(id=ticket_id).first()


def receipt_get(*, key: str) -> dict[str, Any] | None:
    """The receipt stored under an Idempotency-Key (committed keys always hold one)."""
    record = IdempotencyRecord.objects.filter(key=key, receipt__isnull=False).first()
    return None if record is None else record.receipt


def notifications_sent(*, recipient: str | None = None) -> QuerySet[Notification]:
    sent = Notification.objects.order_by("id")
    return sent if recipient is None else sent.filter(recipient=recipient)


def charge_get(*, charge_id: str) -> Charge | None:
    return Charge.objects.filter(receipt_id=charge_id).first()


def charges_with_metadata(*, name: str, value: str) -> QuerySet[Charge]:
    """Charges whose metadata holds name = value, newest first as Stripe's search answers."""
    return Charge.objects.filter(**{f"metadata__{name}": value}).order_by("-created_at", "-id")


def effects_ledger(*, tool: str | None = None, key: str | None = None) -> QuerySet[Effect]:
    ledger = Effect.objects.order_by("id")
    if tool is not None:
        ledger = ledger.filter(tool=tool)
    if key is not None:
        ledger = ledger.filter(idempotency_key=key)
    return ledger


def fault_plans_pending() -> QuerySet[FaultPlan]:
    return FaultPlan.objects.filter(remaining__gt=0).order_by("id")
