"""The sandbox's external systems: a ticket desk, a notifier, a payment processor.

Every table lives in the "sandbox" database (see sandbox.routers). The effects ledger is
written in the same transaction as every effect, so tests can count duplicates against it.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


class Ticket(models.Model):
    class Status(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"

    id = models.CharField(primary_key=True, max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    # Grows by one on every change, so a receipt can name the version it produced.
    version = models.PositiveBigIntegerField(default=1)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = (
            models.CheckConstraint(
                condition=Q(status__in=["open", "closed"]), name="sandbox_ticket_status_valid"
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="sandbox_ticket_version_min"),
        )

    def __str__(self) -> str:
        return f"{self.id} ({self.status}, v{self.version})"


class IdempotencyRecord(models.Model):
    """One per Idempotency-Key: inserted first, in the same transaction as the effect."""

    key = models.CharField(max_length=1000)
    tool = models.CharField(max_length=64)
    intent_digest = models.CharField(max_length=71)
    # Empty only inside the transaction that inserts the key; committed rows hold the receipt.
    receipt = models.JSONField(null=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["key"], name="sandbox_idempotency_key_unique"),
        )

    def __str__(self) -> str:
        return f"{self.tool} {self.key}"


class Notification(models.Model):
    recipient = models.CharField(max_length=254)
    body = models.TextField()
    receipt_id = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = (
            models.UniqueConstraint(
                fields=["receipt_id"], name="sandbox_notification_receipt_unique"
            ),
        )
        indexes = (models.Index(fields=["recipient"], name="sandbox_notification_recipient"),)

    def __str__(self) -> str:
        return f"notification {self.receipt_id} to {self.recipient}"


class Charge(models.Model):
    receipt_id = models.CharField(max_length=64)
    customer = models.CharField(max_length=64)
    amount_cents = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    refunded_cents = models.PositiveBigIntegerField(default=0)
    # Grows by one on every refund: the target version a refund's receipt names.
    version = models.PositiveBigIntegerField(default=1)
    # Strings the caller attached (Stripe's metadata[...]), kept and answered with the charge.
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["receipt_id"], name="sandbox_charge_receipt_unique"),
            models.CheckConstraint(
                condition=Q(amount_cents__gte=1), name="sandbox_charge_amount_positive"
            ),
            models.CheckConstraint(
                condition=Q(refunded_cents__lte=models.F("amount_cents")),
                name="sandbox_charge_refunds_within_amount",
            ),
        )

    def __str__(self) -> str:
        return f"charge {self.receipt_id} {self.amount_cents} {self.currency}"


class Refund(models.Model):
    receipt_id = models.CharField(max_length=64)
    charge = models.ForeignKey(Charge, on_delete=models.PROTECT, related_name="refunds")
    amount_cents = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["receipt_id"], name="sandbox_refund_receipt_unique"),
            models.CheckConstraint(
                condition=Q(amount_cents__gte=1), name="sandbox_refund_amount_positive"
            ),
        )

    def __str__(self) -> str:
        return f"refund {self.receipt_id} of {self.amount_cents}"


class Effect(models.Model):
    """The ledger of every effect the sandbox performed: the ground truth for duplicates."""

    tool = models.CharField(max_length=64)
    target = models.CharField(max_length=254)
    # Null, not "", for a call without a key (the notifier has no key support).
    idempotency_key = models.CharField(max_length=1000, null=True)  # noqa: DJ001
    receipt_id = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = (
            models.Index(fields=["tool"], name="sandbox_effect_tool"),
            models.Index(fields=["idempotency_key"], name="sandbox_effect_key"),
        )

    def __str__(self) -> str:
        return f"{self.tool} {self.target} ({self.receipt_id})"


class FaultKind(models.TextChoices):
    FAIL_BEFORE_COMMIT = "fail_before_commit"
    COMMIT_THEN_DROP = "commit_then_drop"
    COMMIT_THEN_MALFORMED = "commit_then_malformed"
    COMMIT_THEN_FAIL = "commit_then_fail"
    COMMIT_THEN_HANG = "commit_then_hang"
    HANG_BEFORE_COMMIT = "hang_before_commit"
    RATE_LIMIT = "rate_limit"
    SLOW = "slow"


class FaultPlan(models.Model):
    """A fault to inject into the next `remaining` calls of one tool (tests only)."""

    tool = models.CharField(max_length=64)
    kind = models.CharField(max_length=32, choices=FaultKind.choices)
    # Seconds for the hangs, Retry-After seconds for rate_limit, milliseconds for slow.
    parameter = models.FloatField(null=True)
    remaining = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = (
            models.CheckConstraint(
                condition=Q(kind__in=[kind.value for kind in FaultKind]),
                name="sandbox_fault_kind_valid",
            ),
        )
        indexes = (
            models.Index(
                fields=["tool", "id"], condition=Q(remaining__gt=0), name="sandbox_fault_pending"
            ),
        )

    def __str__(self) -> str:
        suffix = "" if self.parameter is None else f":{self.parameter:g}"
        return f"{self.tool} {self.kind}{suffix} x{self.remaining}"
