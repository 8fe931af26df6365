"""Operator pages of runs: the inbox and the run pages (included at the site root)."""

from __future__ import annotations

from django.urls import path

from control.web import tenant_switch
from runs import views

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/bulk/", views.inbox_bulk, name="inbox_bulk"),
    path("inbox/<uuid:action_pk>/approve/", views.inbox_approve, name="inbox_approve"),
    path("inbox/<uuid:action_pk>/reject/", views.inbox_reject, name="inbox_reject"),
    path("inbox/<uuid:action_pk>/edit/", views.inbox_edit, name="inbox_edit"),
    path("inbox/<uuid:action_pk>/ask-again/", views.inbox_ask_again, name="inbox_ask_again"),
    path("runs/", views.run_list, name="run_list"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("policies/", views.tool_policies, name="tool_policies"),
    path("tenant/", tenant_switch, name="tenant_switch"),
]
