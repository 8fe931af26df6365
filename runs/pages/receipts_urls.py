"""The receipts ledger; control/urls.py mounts it at /receipts/."""

from __future__ import annotations

from django.urls import path

from runs.pages import evidence, receipts

urlpatterns = [
    path("", receipts.receipt_ledger, name="receipt_ledger"),
    path("export.csv", receipts.receipt_export, name="receipt_export"),
    path("evidence.zip", evidence.evidence_download, name="evidence_download"),
]
