"""Operator pages of runs: the inbox, the run pages, the tools and their policies (at the
site root)."""

from __future__ import annotations

from django.urls import path

from control.web.pages import tenant_switch
from runs.pages import (
    catalog,
    decision_links,
    inbox,
    plans,
    policies,
    run_pages,
    standing,
    target_now,
)

urlpatterns = [
    path("inbox/", inbox.inbox, name="inbox"),
    path("inbox/bulk/", inbox.inbox_bulk, name="inbox_bulk"),
    path("inbox/<uuid:action_pk>/approve/", inbox.inbox_approve, name="inbox_approve"),
    path("inbox/<uuid:action_pk>/reject/", inbox.inbox_reject, name="inbox_reject"),
    path("inbox/<uuid:action_pk>/edit/", inbox.inbox_edit, name="inbox_edit"),
    path("inbox/<uuid:action_pk>/ask-again/", inbox.inbox_ask_again, name="inbox_ask_again"),
    path("inbox/<uuid:action_pk>/target/", target_now.inbox_target_now, name="inbox_target_now"),
    path("inbox/plans/<uuid:plan_pk>/", plans.inbox_plan, name="inbox_plan"),
    path(
        "inbox/plans/<uuid:plan_pk>/approve/", plans.inbox_plan_approve, name="inbox_plan_approve"
    ),
    path("inbox/plans/<uuid:plan_pk>/reject/", plans.inbox_plan_reject, name="inbox_plan_reject"),
    path("inbox/plans/<uuid:plan_pk>/drop/", plans.inbox_plan_drop, name="inbox_plan_drop"),
    # The link an "approval requested" mail carries: signed, single use, short-lived.
    path("decide/<str:token>/", decision_links.decision_link, name="decision_link"),
    path("runs/", run_pages.run_list, name="run_list"),
    path("runs/<uuid:run_id>/", run_pages.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/cancel/", run_pages.run_cancel, name="run_cancel"),
    path(
        "runs/<uuid:run_id>/writes/<uuid:action_pk>/retry-now/",
        run_pages.action_retry_now,
        name="action_retry_now",
    ),
    path(
        "runs/<uuid:run_id>/writes/<uuid:action_pk>/give-up/",
        run_pages.action_give_up,
        name="action_give_up",
    ),
    path("tools/", catalog.tool_list, name="tool_list"),
    path("policies/", policies.tool_policies, name="tool_policies"),
    path("policies/rules/", standing.standing_rule_create, name="standing_rule_create"),
    path(
        "policies/rules/<uuid:rule_pk>/approve/",
        standing.standing_rule_approve,
        name="standing_rule_approve",
    ),
    path(
        "policies/rules/<uuid:rule_pk>/revoke/",
        standing.standing_rule_revoke,
        name="standing_rule_revoke",
    ),
    path("tenant/", tenant_switch, name="tenant_switch"),
]
