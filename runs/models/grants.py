"""Standing grants: a tenant's rules that approve future intents of one tool within limits
(runs.services.standing). A rule is itself a decision: it is active once the tool policy's
approvers have approved it, until it expires or is revoked."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from control.models import SignedRow, Tenant


class StandingGrant(SignedRow):
    """Signed with its approvers and use counters (runs.record.signed_rows): a rule
    that does not verify approves nothing."""

    class Status(models.TextChoices):
        PROPOSED = "proposed"  # waiting for its approvers
        ACTIVE = "active"
        REVOKED = "revoked"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="standing_grants")
    tool = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    # A regular expression the whole normalized target must match; empty: any target.
    target_pattern = models.CharField(max_length=500, blank=True)
    # Bounds per argument: {"amount": {"maximum": 5000}, "currency": {"enum": ["usd"]}}.
    arg_bounds = models.JSONField(default=dict, blank=True)
    max_uses = models.PositiveIntegerField(null=True, blank=True)
    uses_per_hour = models.PositiveIntegerField(null=True, blank=True)
    # A cumulative cap on one numeric argument over every use (e.g. refunds' amount).
    amount_argument = models.CharField(max_length=100, blank=True)
    amount_cap = models.DecimalField(max_digits=24, decimal_places=6, null=True, blank=True)
    expires_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROPOSED)
    # The tool policy's approval rules when the rule was proposed: frozen into it.
    required_approvals = models.PositiveSmallIntegerField(default=1)
    four_eyes = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    # Counters, changed only under the rule's row lock in the transaction that uses it.
    uses = models.PositiveIntegerField(default=0)
    amount_used = models.DecimalField(max_digits=24, decimal_places=6, default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoke_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "tool", "status"], name="standing_grant_lookup")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["proposed", "active", "revoked"]),
                name="standing_grant_known_status",
            ),
            models.CheckConstraint(
                condition=Q(amount_cap__isnull=True) | ~Q(amount_argument=""),
                name="standing_grant_cap_names_its_argument",
            ),
        ]

    def __str__(self) -> str:
        return f"rule {self.name!r} for {self.tool}"

    @property
    def remaining_uses(self) -> int | None:
        return None if self.max_uses is None else max(self.max_uses - self.uses, 0)

    @property
    def remaining_amount(self):
        return None if self.amount_cap is None else max(self.amount_cap - self.amount_used, 0)


class StandingGrantApproval(models.Model):
    """One approver's decision that makes a rule active."""

    grant = models.ForeignKey(StandingGrant, on_delete=models.PROTECT, related_name="approvals")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["grant", "approver"], name="standing_grant_one_approval_per_person"
            )
        ]

    def __str__(self) -> str:
        return f"approval of {self.grant_id} by {self.approver_id}"
