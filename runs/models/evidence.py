"""Decision receipts: what each write's evidence says, one signed statement at a time
(runs.record.evidence writes them; `export_evidence` and `countersign-verify` read them).

An intent's statements form a chain of their own: the decision (or that none was needed),
then what its execution came to (the external system's receipt, the case that opened, the
person's resolution), or the statement that it was never sent. Each is canonical JSON signed
with an Ed25519 key (control.foundation.evidence_keys) and names the hash of the one before,
so a reader holding only the public key can check every statement and that none is missing
between two. Insert-only, in the database too (migration 0024's trigger).
"""

from __future__ import annotations

from django.db import models

from control.models import Tenant
from runs.models.intents import Action


class Statement(models.Model):
    class Kind(models.TextChoices):
        DECISION = "decision"  # approve or reject, by a person, a link, or a standing rule
        UNREVIEWED = "unreviewed"  # the tool's policy asks no approval: executed as proposed
        EXECUTED = "executed"  # the external system's receipt (or a reconciler's evidence)
        FAILED = "failed"  # for good: the system refused it, or a person gave up on it
        UNCERTAIN = "uncertain"  # the outcome is unknown: a case is open
        RESOLVED = "resolved"  # a reconciler's resolution of that case
        NEVER_SENT = "never_sent"  # rejected, expired or dropped with no attempt made

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="statements")
    seq = models.PositiveIntegerField()  # its place in the action's chain, from 1
    kind = models.CharField(max_length=16, choices=Kind.choices)
    body = models.JSONField()  # what is signed, canonicalized (it names seq, kind and prev)
    hash = models.CharField(max_length=71)  # sha256 of the canonical body
    key_id = models.CharField(max_length=64)
    signature = models.CharField(max_length=100)  # Ed25519 over the canonical body, base64url
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["action", "seq"], name="statement_chain_position")
        ]
        indexes = [models.Index(fields=["tenant", "created_at"], name="statement_by_time")]

    def __str__(self) -> str:
        return f"statement {self.seq} ({self.kind}) of action {self.action_id}"
