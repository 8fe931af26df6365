"""Plans: one decision for an exact, bounded set of frozen intents (runs.services.plans)."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from control.models import Tenant
from runs.models.runs import Observation, Run


class Plan(models.Model):
    """The intents a run proposed together (Action.plan), approved or rejected as one.

    `digest` is "sha256:" + sha256 of the canonical JSON list of the items' intent digests,
    sorted: approving the plan grants exactly those intents, each bound to its own digest and
    to this one. The items execute one at a time, in `Action.position` order."""

    class Status(models.TextChoices):
        WAITING_APPROVAL = "waiting_approval"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"
        # An operator dropped items before deciding: a new version replaced it.
        SUPERSEDED = "superseded"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="plans")
    digest = models.CharField(max_length=71)
    status = models.CharField(
        max_length=32, choices=Status.choices, default=Status.WAITING_APPROVAL
    )
    observation = models.ForeignKey(Observation, on_delete=models.PROTECT, related_name="+")
    proposed_by = models.CharField(max_length=150)
    required_approvals = models.PositiveSmallIntegerField(default=1)
    four_eyes = models.BooleanField(default=False)
    expires_at = models.DateTimeField()
    base_version = models.PositiveIntegerField()
    base_event_seq = models.PositiveIntegerField()
    size = models.PositiveIntegerField()
    # What the inbox card says of all the items (runs.services.plan_summaries), computed when
    # the plan is frozen: {"tools": [[tool, count], ...], "differing": [...], "totals": {...}}.
    summary = models.JSONField(default=dict)
    decision_reason = models.TextField(blank=True)
    supersedes = models.OneToOneField(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="superseded_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "digest"], name="plan_unique_digest_per_run"),
            models.CheckConstraint(condition=Q(size__gte=1), name="plan_not_empty"),
        ]
        indexes = [
            # The inbox's page of waiting plans, soonest to expire first.
            models.Index(
                fields=["tenant", "expires_at", "id"],
                condition=Q(status="waiting_approval"),
                name="plan_waiting_queue",
            ),
            # runs.limits.waiting_cap_check: a token's waiting plans, read from the index alone.
            models.Index(
                fields=["tenant", "proposed_by"],
                condition=Q(status="waiting_approval"),
                name="plan_waiting_proposer",
            ),
        ]

    def __str__(self) -> str:
        return f"plan of {self.size} ({self.status})"
