"""The receipts ledger; control/urls.py mounts it at /receipts/."""

from __future__ import annotations

from django.urls import path

from runs import receipts_views

urlpatterns = [
    path("", receipts_views.receipt_ledger, name="receipt_ledger"),
    path("export.csv", receipts_views.receipt_export, name="receipt_export"),
]
