"""The project's URLs plus the routes control/urls.py is still to add (see
test_the_project_routes_the_throttled_login_and_the_receipts_ledger); once it routes them,
delete this module and the `pytest.mark.urls("tests.security.urls")` markers."""

from __future__ import annotations

from django.urls import include, path

from control.auth import login_view
from control.urls import urlpatterns as project_urlpatterns

urlpatterns = [
    path("accounts/login/", login_view, name="login"),
    path("receipts/", include("runs.receipts_urls")),
    *project_urlpatterns,
]
