"""Reconciliation cases in the Django admin: read-only and tenant-scoped (control.admin)."""

from __future__ import annotations

from django.contrib import admin

from control.admin import TENANT_FILTER, ReadOnlyAdmin
from reconciliation.models import ReconciliationCase


@admin.register(ReconciliationCase)
class ReconciliationCaseAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "status",
        "reason",
        "resolution",
        "action",
        "run",
        "tenant",
        "opened_at",
        "resolved_by",
    )
    list_select_related = ("action", "run", "tenant", "resolved_by")
    list_filter = ("status", "reason", "resolution", TENANT_FILTER)
    search_fields = (
        "id__exact",
        "action__idempotency_key",
        "action__receipt__receipt_id",
        "action__target",
        "run__id__exact",
    )
    ordering = ("-opened_at",)
