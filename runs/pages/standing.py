"""Standing rules on the policies page: propose one, approve one, revoke one (admins)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from control.web.pages import ADMIN_ROLES, tenant_member
from runs import services
from runs.exceptions import RunsError
from runs.models import StandingGrant
from runs.pages.forms import RevokeRuleForm, StandingRuleForm
from runs.pages.policies import policies_page


@require_POST
@tenant_member(*ADMIN_ROLES)
def standing_rule_create(request: HttpRequest) -> HttpResponse:
    form = StandingRuleForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            rule = services.standing_grant_propose(
                tenant=request.tenant,
                tool=data["tool"],
                name=data["name"],
                proposer=request.user,
                expires_at=timezone.now() + timedelta(days=data["days"]),
                target_pattern=data["target_pattern"],
                arg_bounds=data["arg_bounds"],
                max_uses=data["max_uses"],
                uses_per_hour=data["uses_per_hour"],
                amount_argument=data["amount_argument"].strip(),
                amount_cap=data["amount_cap"],
            )
        except RunsError as refused:
            form.add_error(None, str(refused))
        else:
            waiting = "" if rule.status == "active" else ": it waits for another approver"
            messages.success(request, f"Proposed the rule {rule.name!r}{waiting}.")
            return redirect("tool_policies")
    return policies_page(request, rule_form=form)


@require_POST
@tenant_member(*ADMIN_ROLES)
def standing_rule_approve(request: HttpRequest, rule_pk) -> HttpResponse:
    rule = get_object_or_404(StandingGrant, pk=rule_pk, tenant=request.tenant)
    try:
        rule = services.standing_grant_approve(rule=rule, approver=request.user)
    except RunsError as refused:
        messages.error(request, f"{rule.name}: {refused}")
    else:
        messages.success(request, f"Approved the rule {rule.name!r}; it is {rule.status}.")
    return redirect("tool_policies")


@require_POST
@tenant_member(*ADMIN_ROLES)
def standing_rule_revoke(request: HttpRequest, rule_pk) -> HttpResponse:
    rule = get_object_or_404(StandingGrant, pk=rule_pk, tenant=request.tenant)
    form = RevokeRuleForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"{rule.name}: say why the rule is revoked.")
        return redirect("tool_policies")
    try:
        services.standing_grant_revoke(
            rule=rule, actor=request.user, reason=form.cleaned_data["reason"]
        )
    except RunsError as refused:
        messages.error(request, f"{rule.name}: {refused}")
    else:
        messages.success(request, f"Revoked the rule {rule.name!r}: it approves nothing more.")
    return redirect("tool_policies")
