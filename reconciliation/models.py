"""Uncertain outcomes: one case per action whose effect cannot be proven either way."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from control.models import Tenant
from runs.models import Action, Run


class ReconciliationCase(models.Model):
    class Status(models.TextChoices):
        PROBING = "probing"  # Countersign still queries by key and reads the target
        OPEN = "open"  # nothing could be proven: a person decides
        AWAITING_SECOND = "awaiting_second"  # four eyes: one reconciler proposed a resolution
        RESOLVED = "resolved"

    class Resolution(models.TextChoices):
        APPLIED = "applied"
        NOT_APPLIED = "not_applied"
        COMPENSATE = "compensate"
        ABANDON = "abandon"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="cases")
    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="cases")
    reason = models.CharField(max_length=64)
    detail = models.TextField(blank=True)
    findings = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROBING)
    probes = models.PositiveSmallIntegerField(default=0)
    next_probe_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=16, choices=Resolution.choices, blank=True)
    resolution_note = models.TextField(blank=True)
    evidence = models.JSONField(null=True, blank=True)
    resend_confirmed = models.BooleanField(default=False)
    # The tool policy's four-eyes rule when the case opened. Relaxing the policy later never
    # lets one reconciler resolve a case opened under four eyes (the live rule still counts
    # when it is stricter): reconciliation.services.case_needs_four_eyes.
    four_eyes_at_open = models.BooleanField(default=False)
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    opened_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["action"],
                condition=~Q(status="resolved"),
                name="case_one_unresolved_per_action",
            ),
            models.CheckConstraint(
                condition=~Q(status="resolved") | ~Q(resolution=""),
                name="case_resolved_has_resolution",
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "opened_at"],
                condition=Q(status__in=["open", "awaiting_second"]),
                name="case_human_queue",
            ),
            models.Index(
                fields=["next_probe_at"], condition=Q(status="probing"), name="case_probe_queue"
            ),
        ]

    def __str__(self) -> str:
        return f"case {self.id} ({self.status})"
