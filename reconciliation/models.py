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
        OPEN = "open"
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
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    resolution = models.CharField(max_length=16, choices=Resolution.choices, blank=True)
    resolution_note = models.TextField(blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    opened_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["action"], condition=Q(status="open"), name="case_one_open_per_action"
            ),
            models.CheckConstraint(
                condition=Q(status="open") | ~Q(resolution=""), name="case_resolved_has_resolution"
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "opened_at"], condition=Q(status="open"), name="case_open_queue"
            ),
        ]

    def __str__(self) -> str:
        return f"case {self.id} ({self.status})"
