"""Runs and their evidence in the Django admin: read-only and tenant-scoped (control.admin).

Search takes an idempotency key, an external receipt id, a target, or a run id (exact UUID).
"""

from __future__ import annotations

from django.contrib import admin

from control.admin import TENANT_FILTER, ReadOnlyAdmin
from runs.models import Action, Approval, Attempt, Checkpoint, Receipt, Run, RunEvent


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "phase", "state_version", "goal", "created_at")
    list_select_related = ("tenant",)
    list_filter = ("phase", TENANT_FILTER)
    search_fields = ("id__exact", "goal", "actions__idempotency_key", "actions__target")
    ordering = ("-created_at",)


@admin.register(Action)
class ActionAdmin(ReadOnlyAdmin):
    list_display = (
        "action_id",
        "tool",
        "target",
        "status",
        "run",
        "tenant",
        "idempotency_key",
        "created_at",
    )
    list_select_related = ("run", "tenant")
    list_filter = ("status", "tool", TENANT_FILTER)
    search_fields = (
        "idempotency_key",
        "receipt__receipt_id",
        "target",
        "run__id__exact",
        "action_id",
        "intent_digest",
    )
    ordering = ("-created_at",)


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("action", "decision", "approver", "state_version", "expires_at", "created_at")
    list_select_related = ("action", "approver")
    list_filter = ("decision", TENANT_FILTER)
    search_fields = (
        "action__idempotency_key",
        "action__receipt__receipt_id",
        "action__target",
        "action__run__id__exact",
        "approver__username",
    )
    ordering = ("-created_at",)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    tenant_path = "action__tenant"
    list_display = ("action", "number", "status", "worker", "lease_version", "started_at")
    list_select_related = ("action",)
    list_filter = ("status",)
    search_fields = (
        "action__idempotency_key",
        "action__receipt__receipt_id",
        "action__target",
        "action__run__id__exact",
    )
    ordering = ("-started_at",)


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    list_display = (
        "receipt_id",
        "idempotency_key",
        "status",
        "source",
        "action",
        "tenant",
        "created_at",
    )
    list_select_related = ("action", "tenant")
    list_filter = ("source", TENANT_FILTER)
    search_fields = (
        "idempotency_key",
        "receipt_id",
        "action__target",
        "action__run__id__exact",
    )
    ordering = ("-created_at",)


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    tenant_path = "run__tenant"
    list_display = ("run", "seq", "type", "actor", "action", "created_at")
    list_select_related = ("run", "action")
    list_filter = ("type",)
    search_fields = (
        "run__id__exact",
        "action__idempotency_key",
        "action__receipt__receipt_id",
        "action__target",
    )
    ordering = ("-created_at",)


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    tenant_path = "run__tenant"
    list_display = ("run", "state_version", "schema_version", "key_id", "created_at")
    list_select_related = ("run",)
    list_filter = ("key_id", "schema_version")
    search_fields = ("run__id__exact", "key_id")
    ordering = ("-created_at",)
