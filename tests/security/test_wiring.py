"""The project routes the throttled login and the receipts ledger, and keeps stored sessions."""

from __future__ import annotations

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY
from django.urls import resolve

from control.auth.login import login_view
from runs.pages.receipts import receipt_export, receipt_ledger
from tests.factories import make_tenant, make_user


def test_the_project_routes_the_throttled_login_and_the_receipts_ledger():
    assert resolve("/accounts/login/").func is login_view
    assert resolve("/receipts/").func is receipt_ledger
    assert resolve("/receipts/export.csv").func is receipt_export


@pytest.mark.django_db
def test_a_session_stored_before_control_auth_became_a_package_stays_logged_in(client):
    """Sessions store their backend's dotted path, and Django logs out a session whose path is
    no longer in AUTHENTICATION_BACKENDS: the path they stored keeps working."""
    user = make_user(make_tenant("wiring"), "auditor")
    client.force_login(user, backend="control.auth.ThrottledModelBackend")
    assert client.session[BACKEND_SESSION_KEY] == "control.auth.ThrottledModelBackend"

    response = client.get("/receipts/")

    assert response.status_code == 200
    assert response.wsgi_request.user == user
