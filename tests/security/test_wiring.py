"""A tripwire for the routes control/urls.py does not have yet.

Until control/urls.py routes /accounts/login/ to control.auth.login_view (before Django's
auth URLs) and includes runs.receipts_urls at /receipts/, the security and ledger tests run
on tests/security/urls.py. This test is expected to fail until then; once the routes exist it
passes, strict xfail turns that into a failure, and the marker, tests/security/urls.py and
the `pytest.mark.urls("tests.security.urls")` markers are to be removed.
"""

from __future__ import annotations

import pytest
from django.urls import resolve

from control.auth import login_view
from runs.receipts_views import receipt_export, receipt_ledger


@pytest.mark.xfail(strict=True, reason="control/urls.py does not route these yet")
def test_the_project_routes_the_throttled_login_and_the_receipts_ledger():
    assert resolve("/accounts/login/").func is login_view
    assert resolve("/receipts/").func is receipt_ledger
    assert resolve("/receipts/export.csv").func is receipt_export
