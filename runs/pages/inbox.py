"""The approval inbox: list, approve, reject, edit then approve, ask again, bulk decisions.

Each view: selector -> form -> one service -> response. Without htmx a POST redirects
(post/redirect/get, the outcome in a flash message); with htmx it renders the page's partial.
A refusal by a service answers 409 with the partial and the reason, so nothing is approved
that the operator did not see: every decision form carries the digest and state version shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import reswap, retarget, trigger_client_event

from control.foundation.tenancy import APPROVER_ROLES
from control.web.pages import (
    INBOX_READER_ROLES,
    can_decide,
    safe_next,
    tenant_member,
    with_query,
)
from runs import selectors, services
from runs.exceptions import InvalidArguments, RunsError
from runs.models import Action
from runs.pages.forms import (
    PRESET_OPTIONS,
    ApproveForm,
    BulkForm,
    EditArgumentsForm,
    InboxFilterForm,
    RejectForm,
    argument_diff,
)
from runs.pages.presenters import MISSING_BINDING, Outcome, inbox_items, refusal
from runs.selectors.decision_views import decision_view, view_digest

INBOX = "runs/action_inbox.html"
EDIT = "runs/action_edit.html"


def _inbox_filters(request: HttpRequest, query) -> tuple[InboxFilterForm, selectors.InboxFilters]:
    proposers = selectors.inbox_proposers(tenant=request.tenant)
    form = InboxFilterForm(query, proposers=proposers)
    filters = selectors.InboxFilters(
        tool=form.value("tool"),
        run=form.value("run"),
        proposer=form.value("proposer"),
        search=form.value("q"),
        risk=form.value("risk") or None,
        by_risk=form.value("sort") == "risk",
    )
    return form, filters


def _inbox_context(request: HttpRequest, query) -> dict:
    form, filters = _inbox_filters(request, query)
    after = query.get("after", "")
    page = selectors.inbox_page(tenant=request.tenant, filters=filters, after=after)
    expired = [] if after else selectors.inbox_expired(tenant=request.tenant, filters=filters)
    duplicates = selectors.duplicate_intents([*page.rows, *expired], tenant=request.tenant)
    # Plans lead the first page of requests, a page of plans at a time (plans_after).
    plans = selectors.PlansPage([])
    if not after:
        plans = selectors.inbox_plans(tenant=request.tenant, after=query.get("plans_after", ""))
    return {
        "filter_form": form,
        "filters": filters,
        "items": inbox_items(request, page.rows, duplicates=duplicates),
        "expired_items": inbox_items(request, expired, duplicates=duplicates),
        "waiting_count": selectors.inbox_waiting_count(tenant=request.tenant, filters=filters),
        "plans_waiting": selectors.inbox_plans_waiting_count(tenant=request.tenant),
        "plans": plans.summaries,
        "more_plans_url": with_query(reverse("inbox"), query, plans_after=plans.next_cursor)
        if plans.next_cursor
        else "",
        "next_url": with_query(reverse("inbox"), query, after=page.next_cursor)
        if page.next_cursor
        else "",
        "list_url": with_query(reverse("inbox"), query),
        "inbox_url": reverse("inbox"),
        "can_decide": can_decide(request),
        "preset_options": PRESET_OPTIONS,
        "refreshed_at": timezone.now(),
    }


@require_GET
@tenant_member(*INBOX_READER_ROLES)
def inbox(request: HttpRequest) -> HttpResponse:
    context = _inbox_context(request, request.GET)
    if request.htmx and not request.htmx.boosted:
        return render(request, f"{INBOX}#inbox-list", context)
    return render(request, INBOX, context)


def _action_or_404(request: HttpRequest, action_pk) -> Action:
    action = selectors.action_by_id(action_pk, tenant=request.tenant)
    if action is None:
        raise Http404("No such request in this tenant.")
    return action


def _inbox_return(request: HttpRequest) -> str:
    return safe_next(request, reverse("inbox"))


def _item_response(
    request: HttpRequest, action: Action, outcome: Outcome, *, status: int = 200
) -> HttpResponse:
    """htmx: the item, fresh from the database, with the outcome; else flash and redirect."""
    if request.htmx:
        fresh = selectors.action_by_id(action.pk, tenant=request.tenant)
        item = inbox_items(request, [fresh], outcome)[0]
        context = {
            "item": item,
            "can_decide": True,
            "preset_options": PRESET_OPTIONS,
            "inbox_url": reverse("inbox"),
        }
        return render(request, f"{INBOX}#item", context, status=status)
    level = messages.SUCCESS if outcome.ok else messages.ERROR
    label = f"{action.tool} {action.target}: {outcome.title}"
    messages.add_message(request, level, f"{label}. {outcome.detail}".strip())
    return redirect(_inbox_return(request))


@require_POST
@tenant_member(*APPROVER_ROLES)
def inbox_approve(request: HttpRequest, action_pk) -> HttpResponse:
    action = _action_or_404(request, action_pk)
    form = ApproveForm(request.POST)
    if not form.is_valid():
        return _item_response(request, action, refusal(MISSING_BINDING), status=400)
    try:
        services.approval_decide(
            action=action, approver=request.user, decision="approve", **form.cleaned_data
        )
    except RunsError as error:
        return _item_response(request, action, refusal(error), status=409)
    action.refresh_from_db(fields=["status"])
    waiting = action.status == Action.Status.WAITING_APPROVAL
    detail = "Waiting for another operator's approval." if waiting else "Queued for a worker."
    return _item_response(request, action, Outcome(True, "Approved", detail))


@require_POST
@tenant_member(*APPROVER_ROLES)
def inbox_reject(request: HttpRequest, action_pk) -> HttpResponse:
    action = _action_or_404(request, action_pk)
    form = RejectForm(request.POST)
    if not form.is_valid():
        problem = MISSING_BINDING if form.has_error("seen_digest") else form.non_field_errors()[0]
        return _item_response(request, action, refusal(problem), status=422)
    try:
        services.approval_decide(
            action=action,
            approver=request.user,
            decision="reject",
            reason=form.cleaned_data["full_reason"],
            seen_digest=form.cleaned_data["seen_digest"],
            seen_state_version=form.cleaned_data["seen_state_version"],
            seen_view=form.cleaned_data["seen_view"],
        )
    except RunsError as error:
        return _item_response(request, action, refusal(error), status=409)
    reason = form.cleaned_data["full_reason"]
    return _item_response(request, action, Outcome(True, "Rejected", f"The agent reads: {reason}"))


@require_POST
@tenant_member(*APPROVER_ROLES)
def inbox_ask_again(request: HttpRequest, action_pk) -> HttpResponse:
    action = _action_or_404(request, action_pk)
    try:
        again = services.action_ask_again(action=action, requester=request.user)
    except RunsError as error:
        return _item_response(request, action, refusal(error), status=409)
    outcome = Outcome(True, "Asked again", f"New request {again.action_id}, new key and expiry.")
    response = _item_response(request, again, outcome)
    if request.htmx:
        response = retarget(reswap(response, "outerHTML"), f"#action-{action.pk}")
    return response


# --- Edit then approve ------------------------------------------------------------------------


def _edit_form(request: HttpRequest, action: Action) -> EditArgumentsForm:
    binding = {
        "seen_digest": action.intent_digest,
        "seen_state_version": action.base_version,
        "seen_view": view_digest(decision_view(action)),
    }
    data = request.POST if request.method == "POST" else None
    return EditArgumentsForm(data, action=action, initial=binding)


def _edit_page(request, action, form, *, outcome=None, status=200) -> HttpResponse:
    valid = form.is_bound and form.is_valid()
    diff = argument_diff(action.args, form.edited_args()) if valid else []
    context = {
        "item": inbox_items(request, [action])[0],
        "form": form,
        "diff": diff,
        "outcome": outcome,
        "reviewing": valid and outcome is None,
        "next_url": _inbox_return(request),
        "plan_url": reverse("inbox_plan", args=[action.plan_id]) if action.plan_id else "",
    }
    return render(request, f"{EDIT}#edit-form" if request.htmx else EDIT, context, status=status)


@require_http_methods(["GET", "POST"])
@tenant_member(*APPROVER_ROLES)
def inbox_edit(request: HttpRequest, action_pk) -> HttpResponse:
    action = _action_or_404(request, action_pk)
    form = _edit_form(request, action)
    try:
        # Refused before any form is shown: a plan's item is decided only with its plan.
        services.refuse_plan_item(action)
    except RunsError as error:
        return _edit_page(request, action, form, outcome=refusal(error), status=409)
    if request.method == "GET" or not form.is_valid() or request.POST.get("step") != "approve":
        return _edit_page(request, action, form, status=200 if not form.errors else 422)
    try:
        edited = services.action_edit_and_approve(
            action=action,
            editor=request.user,
            args=form.edited_args(),
            seen_digest=form.cleaned_data["seen_digest"],
            seen_state_version=form.cleaned_data["seen_state_version"],
            seen_view=form.cleaned_data["seen_view"],
            reason=form.cleaned_data["edit_reason"],
        )
    except RunsError as error:
        # Arguments the tool refuses are the form's to fix (422); anything else is the
        # request having changed or being closed meanwhile (409).
        status = 422 if isinstance(error, InvalidArguments) else 409
        return _edit_page(request, action, form, outcome=refusal(error), status=status)
    response = _item_response(request, edited, _edited_outcome(action, edited))
    if request.htmx:
        response = retarget(reswap(response, "outerHTML"), f"#action-{action.pk}")
    return response


def _edited_outcome(old: Action, new: Action) -> Outcome:
    approved = new.status != Action.Status.WAITING_APPROVAL
    title = "Edited and approved" if approved else "Edited; waiting for a second operator"
    detail = (
        f"{new.action_id} supersedes {old.action_id}. New key {new.idempotency_key}, "
        f"new digest {new.intent_digest}."
    )
    return Outcome(True, title, detail, argument_diff(old.args, new.args))


# --- Bulk decisions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkResult:
    label: str
    ok: bool
    text: str


def _decide_each(request: HttpRequest, cleaned: dict) -> list[BulkResult]:
    """Each selected request is decided on its own, bound to what was shown for it; one
    refusal does not stop the others."""
    selections = cleaned["selections"]
    found = selectors.actions_by_ids([s.action_pk for s in selections], tenant=request.tenant)
    return [_decide_one(request, found.get(s.action_pk), s, cleaned) for s in selections]


def _decide_one(request: HttpRequest, action: Action | None, selection, cleaned) -> BulkResult:
    if action is None:
        return BulkResult(selection.action_pk, False, "No such request here.")
    label = f"{action.tool} {action.target} ({action.action_id})"
    try:
        services.approval_decide(
            action=action,
            approver=request.user,
            decision=cleaned["decision"],
            reason=cleaned.get("full_reason", ""),
            seen_digest=selection.seen_digest,
            seen_state_version=selection.seen_state_version,
        )
    except RunsError as error:
        outcome = refusal(error)
        return BulkResult(label, False, f"{outcome.title}. {outcome.detail}")
    return BulkResult(label, True, "Approved" if cleaned["decision"] == "approve" else "Rejected")


@require_POST
@tenant_member(*APPROVER_ROLES)
def inbox_bulk(request: HttpRequest) -> HttpResponse:
    form = BulkForm(request.POST)
    if not form.is_valid():
        results = [BulkResult("Nothing was decided", False, e) for e in form.non_field_errors()]
        status = 422
    else:
        results, status = _decide_each(request, form.cleaned_data), 200
    if request.htmx:
        response = render(request, f"{INBOX}#bulk-results", {"results": results}, status=status)
        return trigger_client_event(response, "inbox:refresh")
    for result in results:
        level = messages.SUCCESS if result.ok else messages.ERROR
        messages.add_message(request, level, f"{result.label}: {result.text}")
    return redirect(_inbox_return(request))
