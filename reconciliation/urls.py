"""Reconciliation pages; control/urls.py mounts them at /reconciliation/."""

from __future__ import annotations

from django.urls import path

from reconciliation import views

urlpatterns = [
    path("", views.case_list, name="case_list"),
    path("<uuid:case_id>/", views.case_detail, name="case_detail"),
    path("<uuid:case_id>/resolve/", views.case_resolve, name="case_resolve"),
    path("<uuid:case_id>/probe/", views.case_probe_now, name="case_probe_now"),
]
