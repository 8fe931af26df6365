"""Countersign's URL map: the composition root wires every app's pages and the API here."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.views import LogoutView, PasswordChangeDoneView
from django.urls import include, path

from control.api import api
from control.auth.login import login_view
from control.auth.passwords import password_change_view
from control.metrics import metrics_view
from control.web import health, keys, pages, zones
from control.web.dashboard import dashboard_urls
from runs.gateway.http import mcp_endpoint

urlpatterns = [
    path("", pages.home, name="home"),
    path("healthz", health.healthz, name="healthz"),
    path(".well-known/countersign-keys.json", keys.countersign_keys, name="countersign_keys"),
    path("metrics", metrics_view, name="metrics"),
    path("accounts/login/", login_view, name="login"),
    # No password reset: the deployment sends no mail by default (SECURITY.md).
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", password_change_view, name="password_change"),
    path("accounts/time_zone/", zones.time_zone_view, name="time_zone"),
    path(
        "accounts/password_change/done/",
        PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("admin/", admin.site.urls),
    # Tenant-blind pages: superusers only (control/web/dashboard.py).
    path("django-rq/", include(dashboard_urls())),
    path("api/v1/", api.urls),
    # The MCP gateway (runs/gateway): the same tenant tokens, JSON-RPC over Streamable HTTP.
    path("mcp/", mcp_endpoint, name="mcp"),
    path("mcp", mcp_endpoint),
    path("receipts/", include("runs.pages.receipts_urls")),
    path("audit/", include("control.web.audit_urls")),
    path("reconciliation/", include("reconciliation.urls")),
    # The demo's fake external systems, with no login and no CSRF: only where SANDBOX_ENABLED.
    *([path("sandbox/", include("sandbox.urls"))] if settings.SANDBOX_ENABLED else []),
    path("", include("runs.pages.urls")),
]
