"""The site's URLs with the reconciliation pages mounted where control/urls.py mounts them
(`/reconciliation/`), for the tests of those pages (`@pytest.mark.urls`)."""

from __future__ import annotations

from django.urls import include, path

from control.urls import urlpatterns as site_urlpatterns

urlpatterns = [
    path("reconciliation/", include("reconciliation.urls")),
    *site_urlpatterns,
]
