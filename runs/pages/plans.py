"""Deciding a plan in the inbox: approve or reject every intent of it at once, bound to the
plan digest and the state version the operator saw (post/redirect/get, a flash message)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from control.tenancy import APPROVER_ROLES
from control.web import tenant_member
from runs import services
from runs.exceptions import RunsError
from runs.models import Plan
from runs.pages.forms import ApproveForm, RejectForm
from runs.pages.presenters import MISSING_BINDING


def _plan_or_404(request: HttpRequest, plan_pk) -> Plan:
    plan = Plan.objects.filter(pk=plan_pk, tenant=request.tenant).first()
    if plan is None:
        raise Http404("No such plan in this tenant.")
    return plan


def _decide(request: HttpRequest, plan: Plan, decision: str, form) -> HttpResponse:
    if not form.is_valid():
        problem = MISSING_BINDING if form.has_error("seen_digest") else form.errors.as_text()
        messages.error(request, f"Plan of {plan.size}: {problem}")
        return redirect("inbox")
    reason = form.cleaned_data.get("full_reason", "")
    try:
        services.plan_decide(
            plan=plan,
            approver=request.user,
            decision=decision,
            seen_digest=form.cleaned_data["seen_digest"],
            seen_state_version=form.cleaned_data["seen_state_version"],
            reason=reason,
        )
    except RunsError as error:
        messages.error(request, f"Plan of {plan.size}: refused. {error}")
        return redirect("inbox")
    plan.refresh_from_db(fields=["status"])
    if plan.status == Plan.Status.APPROVED:
        said = f"Approved all {plan.size}: each goes to a worker in order, under its own key."
    elif plan.status == Plan.Status.REJECTED:
        said = f"Rejected all {plan.size}. The agent reads: {reason}"
    else:
        said = "Your approval is recorded; waiting for another operator's."
    messages.success(request, f"Plan of {plan.size}: {said}")
    return redirect("inbox")


@require_POST
@tenant_member(*APPROVER_ROLES)
def inbox_plan_approve(request: HttpRequest, plan_pk) -> HttpResponse:
    return _decide(request, _plan_or_404(request, plan_pk), "approve", ApproveForm(request.POST))


@require_POST
@tenant_member(*APPROVER_ROLES)
def inbox_plan_reject(request: HttpRequest, plan_pk) -> HttpResponse:
    return _decide(request, _plan_or_404(request, plan_pk), "reject", RejectForm(request.POST))
