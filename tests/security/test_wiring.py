"""The project routes the throttled login and the receipts ledger."""

from __future__ import annotations

from django.urls import resolve

from control.auth.login import login_view
from runs.pages.receipts import receipt_export, receipt_ledger


def test_the_project_routes_the_throttled_login_and_the_receipts_ledger():
    assert resolve("/accounts/login/").func is login_view
    assert resolve("/receipts/").func is receipt_ledger
    assert resolve("/receipts/export.csv").func is receipt_export
