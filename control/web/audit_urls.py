"""The audit page; control/urls.py mounts it at /audit/."""

from __future__ import annotations

from django.urls import path

from control.web import audit

urlpatterns = [
    path("", audit.audit_log, name="audit_log"),
    path("export.csv", audit.audit_export_csv, name="audit_export_csv"),
    path("export.jsonl", audit.audit_export_jsonl, name="audit_export_jsonl"),
]
