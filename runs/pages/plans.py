"""Deciding a plan in the inbox: approve or reject every intent of it at once, bound to the
plan digest and the state version the operator saw (post/redirect/get, a flash message)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from control.foundation.tenancy import APPROVER_ROLES
from control.web.pages import (
    INBOX_READER_ROLES,
    can_decide,
    compact_json,
    tenant_member,
    with_query,
)
from runs import selectors, services
from runs.exceptions import RunsError
from runs.models import Plan
from runs.pages.forms import ApproveForm, RejectForm
from runs.pages.presenters import MISSING_BINDING


def _plan_or_404(request: HttpRequest, plan_pk) -> Plan:
    plan = selectors.plan_of_tenant(plan_pk, tenant=request.tenant)
    if plan is None:
        raise Http404("No such plan in this tenant.")
    return plan


@require_GET
@tenant_member(*INBOX_READER_ROLES)
def inbox_plan(request: HttpRequest, plan_pk) -> HttpResponse:
    """Every intent of a plan, in order, a page at a time, searchable by target and arguments."""
    plan = _plan_or_404(request, plan_pk)
    search = request.GET.get("q", "").strip()[:200]
    try:
        after = int(request.GET.get("after", -1))
    except ValueError:
        after = -1
    items, last = selectors.plan_items_page(plan, search=search, after=after)
    context = {
        "plan": plan,
        "search": search,
        "rows": [(item, compact_json(item.args)) for item in items],
        "next_url": with_query(request.path, request.GET, after=str(last)) if last >= 0 else "",
        "can_drop": plan.status == Plan.Status.WAITING_APPROVAL and can_decide(request),
    }
    return render(request, "runs/plan_detail.html", context)


@require_POST
@tenant_member(*APPROVER_ROLES)
def inbox_plan_drop(request: HttpRequest, plan_pk) -> HttpResponse:
    """Drop the checked intents: a new version of the plan, waiting for a decision."""
    plan = _plan_or_404(request, plan_pk)
    form = ApproveForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Plan of {plan.size}: {MISSING_BINDING}")
        return redirect("inbox_plan", plan_pk=plan.pk)
    try:
        revised = services.plan_revise(
            plan=plan,
            editor=request.user,
            drop=request.POST.getlist("drop"),
            reason=request.POST.get("reason", ""),
            **form.cleaned_data,
        )
    except RunsError as error:
        messages.error(request, f"Plan of {plan.size}: refused. {error}")
        return redirect("inbox_plan", plan_pk=plan.pk)
    dropped = plan.size - revised.size
    messages.success(
        request,
        f"Dropped {dropped}: a new version of {revised.size} waits for a decision "
        f"(digest {revised.digest[7:19]}).",
    )
    return redirect("inbox_plan", plan_pk=revised.pk)


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
