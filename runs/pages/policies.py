"""Tool policies: an admin's approval rules per tool, one form per tool on one page."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from control.models import Tenant
from control.web.pages import (
    ADMIN_ROLES,
    tenant_member,
)
from runs import selectors, services
from runs.models import Risk
from runs.pages.forms import (
    StandingRuleForm,
    ToolPolicyForm,
    tool_names,
)

POLICIES = "runs/toolpolicy_list.html"


@transaction.atomic
def _policy_forms(tenant: Tenant, posted: ToolPolicyForm | None = None) -> list[ToolPolicyForm]:
    stored = selectors.tool_policies(tenant=tenant)
    # Without a policy of its own, what the tenant gets: a read of a connector not allowed
    # reads without approval needs one (a tool of no enabled connector: shown as needing one).
    defaults = {
        entry["name"]: entry["needs_approval"] for entry in selectors.tool_catalog(tenant=tenant)
    }
    forms = []
    for tool in tool_names():
        if posted is not None and posted.data.get("tool") == tool:
            posted.tool_name, posted.slug, posted.stored = tool, _slug(tool), tool in stored
            posted.nature = Risk(selectors.nature_risk(tool)).label
            forms.append(posted)
            continue
        policy = stored.get(tool)
        initial = {
            "tool": tool,
            "needs_approval": policy.needs_approval if policy else defaults.get(tool, True),
            "four_eyes": policy.four_eyes if policy else False,
            "required_approvals": policy.required_approvals if policy else 1,
            "standing_grants_allowed": policy.standing_grants_allowed if policy else True,
            "approval_minutes": max(
                1,
                (policy.approval_seconds if policy else settings.COUNTERSIGN_APPROVAL_SECONDS)
                // 60,
            ),
            "escalation_minutes": _minutes(policy.escalation_seconds) if policy else None,
            "escalation_contacts": ", ".join(policy.escalation_contacts) if policy else "",
            "link_only_decisions": policy.link_only_decisions if policy else False,
            "risk": policy.risk if policy else None,
        }
        form = ToolPolicyForm(initial=initial, auto_id=policy_field_id(tool))
        form.tool_name, form.slug, form.stored = tool, _slug(tool), policy is not None
        form.unverified = policy.unverified if policy else ""
        form.nature = Risk(selectors.nature_risk(tool)).label
        forms.append(form)
    return forms


def _minutes(seconds: int | None) -> int | None:
    return None if seconds is None else max(1, seconds // 60)


def _slug(tool: str) -> str:
    return tool.replace(".", "-")


def policy_field_id(tool: str) -> str:
    """Each tool's row is its own form on one page; its fields need ids of their own."""
    return f"id_{_slug(tool)}_%s"


@require_http_methods(["GET", "POST"])
@tenant_member(*ADMIN_ROLES)
def tool_policies(request: HttpRequest) -> HttpResponse:
    posted = None
    if request.method == "POST":
        posted = ToolPolicyForm(request.POST, auto_id=policy_field_id(request.POST.get("tool", "")))
        if posted.is_valid():
            data = posted.cleaned_data
            services.tool_policy_set(
                tenant=request.tenant,
                tool=data["tool"],
                needs_approval=data["needs_approval"],
                four_eyes=data["four_eyes"],
                required_approvals=data["required_approvals"],
                approval_seconds=data["approval_minutes"] * 60,
                standing_grants_allowed=data["standing_grants_allowed"],
                escalation_seconds=(data["escalation_minutes"] or 0) * 60 or None,
                escalation_contacts=data["escalation_contacts"],
                link_only_decisions=data["link_only_decisions"],
                risk=data["risk"],
                actor=request.user.get_username(),
            )
            messages.success(request, f"Saved the policy for {data['tool']}.")
            return redirect("tool_policies")
    return policies_page(request, posted=posted)


def policies_page(
    request: HttpRequest,
    *,
    posted: ToolPolicyForm | None = None,
    rule_form: StandingRuleForm | None = None,
) -> HttpResponse:
    """The page, with a refused form (422) when one is given."""
    context = {
        "forms": _policy_forms(request.tenant, posted),
        "rules": selectors.standing_rules(tenant=request.tenant),
        "rule_form": rule_form or StandingRuleForm(),
    }
    refused = posted is not None or rule_form is not None
    return render(request, POLICIES, context, status=422 if refused else 200)
