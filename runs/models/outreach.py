"""The marks that make escalations and email decisions happen once: one Escalation row per
request past its SLA, one DecisionLinkUse row per decision link used."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from control.models import Tenant
from runs.models.intents import Action


class Escalation(models.Model):
    """A request waited past its tool policy's SLA and its escalation contacts were told.
    Insert-only; the unique action makes a second sweeper's insert fail instead of notify."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    action = models.OneToOneField(Action, on_delete=models.PROTECT, related_name="escalation")
    sla_seconds = models.PositiveIntegerField()
    contacts = models.JSONField(default=list)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"escalation of {self.action_id} after {self.sla_seconds}s"


class DecisionLinkUse(models.Model):
    """A decision link from an email was used: its nonce is unique, so it decides once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT)
    nonce = models.CharField(max_length=64, unique=True)
    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="link_uses")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    decision = models.CharField(max_length=8)
    logged_in = models.BooleanField()
    used_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"decision link {self.nonce} used by {self.approver_id}"
