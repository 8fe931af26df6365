"""Runs: their events, checkpoints, observations and the lease a worker holds on one."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from control.models import Tenant


class Run(models.Model):
    class Phase(models.TextChoices):
        RUNNING = "running"
        WAITING_APPROVAL = "waiting_approval"
        EXECUTING = "executing"
        WAITING_RECONCILIATION = "waiting_reconciliation"
        COMPLETED = "completed"
        BUDGET_EXHAUSTED = "budget_exhausted"
        DEADLINE_EXCEEDED = "deadline_exceeded"
        CANCELLED = "cancelled"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="runs")
    goal = models.TextField()
    phase = models.CharField(max_length=32, choices=Phase.choices, default=Phase.RUNNING)
    state_version = models.PositiveIntegerField(default=0)
    last_event_seq = models.PositiveIntegerField(default=0)
    event_head_hash = models.CharField(max_length=71, blank=True)
    plan = models.JSONField(default=dict, blank=True)
    # The completed work as a count and a running hash over its receipts (runs.record.completed).
    completed_count = models.PositiveIntegerField(default=0)
    completed_digest = models.CharField(max_length=71, default="sha256:" + "0" * 64)
    pending_work = models.JSONField(default=list, blank=True)
    budget_limit = models.PositiveIntegerField(null=True, blank=True)
    budget_used = models.PositiveIntegerField(default=0)
    deadline = models.DateTimeField(null=True, blank=True)
    versions = models.JSONField(default=dict, blank=True)
    next_eligible_at = models.DateTimeField(null=True, blank=True)
    retry_count = models.PositiveIntegerField(default=0)
    stop_reason = models.TextField(blank=True)
    evidence = models.JSONField(null=True, blank=True)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    phase__in=[
                        "running",
                        "waiting_approval",
                        "executing",
                        "waiting_reconciliation",
                        "completed",
                        "budget_exhausted",
                        "deadline_exceeded",
                        "cancelled",
                        "failed",
                    ]
                ),
                name="run_known_phase",
            ),
            models.CheckConstraint(
                condition=~Q(phase="completed") | Q(evidence__isnull=False),
                name="run_completed_has_evidence",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="run_tenant_created"),
            models.Index(fields=["tenant", "phase"], name="run_tenant_phase"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.phase})"


TERMINAL_PHASES = frozenset(
    {
        Run.Phase.COMPLETED,
        Run.Phase.BUDGET_EXHAUSTED,
        Run.Phase.DEADLINE_EXCEEDED,
        Run.Phase.CANCELLED,
        Run.Phase.FAILED,
    }
)


class RunEvent(models.Model):
    """Append-only; `seq` is continuous per run and `hash` chains each event to the last."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=64)
    action = models.ForeignKey(
        "Action", on_delete=models.PROTECT, null=True, blank=True, related_name="events"
    )
    actor = models.CharField(max_length=150)
    payload = models.JSONField(default=dict, blank=True)
    changes = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    prev_hash = models.CharField(max_length=71)
    hash = models.CharField(max_length=71)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="run_event_unique_seq"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="run_event_seq_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class Checkpoint(models.Model):
    """A signed envelope of the run's recoverable state, exactly as it was signed."""

    # No index of its own: checkpoint_unique_version (run, state_version) serves every
    # lookup by run, and the newest one is its last entry. With a second index on run alone
    # the planner, on statistics older than a long run, read all of a run's checkpoints and
    # sorted them (17 ms at 20,000), and every checkpoint paid for two index inserts.
    run = models.ForeignKey(
        Run, on_delete=models.PROTECT, related_name="checkpoints", db_index=False
    )
    state_version = models.PositiveIntegerField()
    schema_version = models.PositiveSmallIntegerField()
    key_id = models.CharField(max_length=64)
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "state_version"], name="checkpoint_unique_version"
            ),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.run_id}@{self.state_version}"


class Observation(models.Model):
    """What justified an action: where it came from and a hash of what was seen."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="observations")
    source = models.CharField(max_length=200)
    ref = models.CharField(max_length=500)
    content_hash = models.CharField(max_length=71)
    summary = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"observation {self.source} {self.ref}"


class Lease(models.Model):
    """One per run. `lease_version` is a fencing token that only grows; time is the database's."""

    run = models.OneToOneField(Run, on_delete=models.PROTECT, primary_key=True)
    owner = models.CharField(max_length=200, blank=True)
    lease_version = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"lease {self.run_id} v{self.lease_version} by {self.owner or 'nobody'}"
