"""Tenancy, roles, API tokens and the audit chain: the foundation every app builds on."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.SlugField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    OPERATOR = "operator"
    RECONCILER = "reconciler"
    AUDITOR = "auditor"
    ADMIN = "admin"


class SignedRow(models.Model):
    """A row that decides approval: its deciding fields are MAC'd under a checkpoint key
    (control.foundation.row_signing), so a database writer without the key cannot forge or
    edit it."""

    key_id = models.CharField(max_length=64, blank=True)
    mac = models.CharField(max_length=64, blank=True)

    class Meta:
        abstract = True


class Membership(SignedRow):
    """One role of one user in one tenant; a person may hold several roles. Signed
    (control.foundation.tenancy.MEMBERSHIP_ROWS): a row that does not verify grants no role."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user", "role"], name="membership_unique_role"
            ),
            models.CheckConstraint(
                condition=models.Q(role__in=Role.values), name="membership_known_role"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} in {self.tenant}"


class ApiToken(models.Model):
    """A tenant-scoped bearer token; only its SHA-256 is stored, the token is shown once."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12)
    token_hash = models.CharField(max_length=71, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="api_token_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"


class AuditEntry(models.Model):
    """Append-only, hash-chained record of every human decision and state transition."""

    seq = models.BigIntegerField(unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, null=True, blank=True)
    actor = models.CharField(max_length=150)
    verb = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    prev_hash = models.CharField(max_length=71)
    hash = models.CharField(max_length=71, unique=True)

    class Meta:
        ordering = ["seq"]
        indexes = [models.Index(fields=["tenant", "seq"], name="audit_tenant_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.actor} {self.verb}"


class AuditChainHead(models.Model):
    """A single row that serialises appends to the audit chain and names its current head."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)
    hash = models.CharField(max_length=71, default="sha256:" + "0" * 64)
    # HMAC of (seq, hash) under a checkpoint key: whoever rewrites entries and recomputes
    # their plain hashes cannot re-sign the head (control.foundation.audit.audit_verify).
    key_id = models.CharField(max_length=64, blank=True)
    mac = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="audit_head_single")]

    def __str__(self) -> str:
        return f"audit head #{self.seq}"


class ApiIdempotencyKey(models.Model):
    """One `Idempotency-Key` a tenant sent with a POST (IETF httpapi idempotency draft).

    `fingerprint` binds the key to the first request (method, path and body hash); once that
    request has finished, its status and body are stored here and replayed for the same key
    and body. Rows live 24 hours from `created_at` and are then purged by the sweep
    (control.api_kit.idempotency.purge_expired).
    """

    class State(models.TextChoices):
        IN_FLIGHT = "in_flight"
        COMPLETED = "completed"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=71)
    state = models.CharField(max_length=16, choices=State.choices, default=State.IN_FLIGHT)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_content_type = models.CharField(max_length=100, blank=True)
    response_body = models.TextField(blank=True)
    created_at = models.DateTimeField(db_default=models.functions.Now())
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="api_idempotency_unique_key"),
            models.CheckConstraint(
                condition=models.Q(state__in=["in_flight", "completed"]),
                name="api_idempotency_known_state",
            ),
            models.CheckConstraint(
                condition=models.Q(state="in_flight") | models.Q(response_status__isnull=False),
                name="api_idempotency_completed_has_response",
            ),
        ]
        indexes = [models.Index(fields=["created_at"], name="api_idempotency_created")]

    def __str__(self) -> str:
        return f"idempotency key {self.key!r} ({self.state})"


class LoginFailure(models.Model):
    """One failed login, by the username tried (case-folded) and the client's address.

    The failure that reaches a limit also records until when it locks that username or that
    address (control.auth.throttle). Rows older than the window and the lock are purged on each
    write.
    """

    username = models.CharField(max_length=150)
    address = models.CharField(max_length=45, blank=True)
    created_at = models.DateTimeField()
    locks_username_until = models.DateTimeField(null=True, blank=True)
    locks_address_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["username", "created_at"], name="login_failure_username"),
            models.Index(fields=["address", "created_at"], name="login_failure_address"),
            models.Index(fields=["created_at"], name="login_failure_created"),
        ]

    def __str__(self) -> str:
        return f"failed login as {self.username!r} from {self.address or 'unknown'}"


class MetricCount(models.Model):
    """One signed change (or a folded sum of them) to a count `/metrics` reports: written by
    database triggers in the transaction that changed the counted row, summed at scrape
    (control.foundation.rollup). `label_a` and `label_b` mean what the metric's owner says."""

    metric = models.CharField(max_length=64)
    label_a = models.CharField(max_length=64, blank=True)
    label_b = models.CharField(max_length=64, blank=True)
    value = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.metric}{{{self.label_a},{self.label_b}}} {self.value:+d}"


class Preference(models.Model):
    """What a person chose for their own pages: the time zone moments are shown in ("" is
    the server's, TIME_ZONE). Read into the session at login (control.web.zones)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference"
    )
    time_zone = models.CharField(max_length=64, blank=True)

    def __str__(self) -> str:
        return f"{self.user} prefers {self.time_zone or 'the server time zone'}"
