"""The run list, the run page (timeline, checkpoints and their verification), cancel, and an
operator's "retry now (same key)" or "give up" for a write that outlasted its retry window."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from control.foundation.tenancy import APPROVER_ROLES
from control.web.pages import (
    can_decide,
    compact_json,
    pretty_json,
    tenant_member,
    with_query,
)
from runs import selectors
from runs.exceptions import RunsError
from runs.models import TERMINAL_PHASES, Run
from runs.pages.forms import (
    CancelForm,
    GiveUpForm,
    RunFilterForm,
)
from runs.pages.presenters import EventView, action_views, verified_checkpoints
from runs.services import endings

RUNS = "runs/run_list.html"
RUN = "runs/run_detail.html"
CANCEL = "runs/run_cancel.html"


@require_GET
@tenant_member()
def run_list(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    filters = selectors.RunFilters(
        phase=form.value("phase"), tool=form.value("tool"), search=form.value("q")
    )
    after = request.GET.get("after", "")
    page = selectors.run_page(tenant=request.tenant, filters=filters, after=after)
    context = {
        "filter_form": form,
        "filters": filters,
        "runs": page.rows,
        "first_page": not after,
        "next_url": with_query(reverse("run_list"), request.GET, after=page.next_cursor)
        if page.next_cursor
        else "",
    }
    template = f"{RUNS}#run-table" if request.htmx and not request.htmx.boosted else RUNS
    return render(request, template, context)


def _run_context(request: HttpRequest, detail: selectors.RunDetail, **extra) -> dict:
    run = detail.run
    return {
        "run": run,
        "detail": detail,
        "plan_json": pretty_json(run.plan),
        "budget_left": None
        if run.budget_limit is None
        else max(run.budget_limit - run.budget_used, 0),
        "lease_held": detail.lease is not None
        and detail.lease.expires_at is not None
        and detail.lease.expires_at > timezone.now(),
        "checkpoints": verified_checkpoints(detail.checkpoints, run),
        "actions": action_views(detail.actions),
        "events": [EventView(event) for event in detail.events],
        "evidence_json": compact_json(run.evidence) if run.evidence else "",
        "stop_report": detail.stop_event.payload["report"] if detail.stop_event else None,
        "terminal": run.phase in TERMINAL_PHASES,
        "can_cancel": can_decide(request) and run.phase not in TERMINAL_PHASES,
        "now": timezone.now(),
        **extra,
    }


def _detail_or_404(request: HttpRequest, run_id, before: int | None = None):
    detail = selectors.run_detail(run_id, tenant=request.tenant, events_before=before)
    if detail is None:
        raise Http404("No such run in this tenant.")
    return detail


@require_GET
@tenant_member()
def run_detail(request: HttpRequest, run_id) -> HttpResponse:
    before = request.GET.get("before", "")
    detail = _detail_or_404(request, run_id, int(before) if before.isdigit() else None)
    context = _run_context(request, detail)
    template = f"{RUN}#run-live" if request.htmx and not request.htmx.boosted else RUN
    return render(request, template, context)


@require_http_methods(["GET", "POST"])
@tenant_member(*APPROVER_ROLES)
def run_cancel(request: HttpRequest, run_id) -> HttpResponse:
    run = selectors.run_by_id(run_id, tenant=request.tenant)
    if run is None:
        raise Http404("No such run in this tenant.")
    form = CancelForm(request.POST or None)
    if request.method == "GET" or not form.is_valid():
        return _cancel_page(request, run, form)
    try:
        endings.run_cancel_asking_first(
            run=run, reason=form.cleaned_data["reason"], actor=request.user.get_username()
        )
    except RunsError as error:
        return _cancel_page(request, run, form, error=str(error), status=409)
    if request.htmx:
        context = _run_context(request, _detail_or_404(request, run.pk), just_cancelled=True)
        return render(request, f"{RUN}#run-live", context)
    messages.success(request, "Run cancelled. The report below lists what was done and in doubt.")
    return redirect("run_detail", run_id=run.pk)


def _cancel_page(request, run: Run, form, *, error: str = "", status: int = 200) -> HttpResponse:
    context = {
        "run": run,
        "form": form,
        "report": selectors.run_effects_report(run),
        "error": error,
        "terminal": run.phase in TERMINAL_PHASES,
    }
    return render(request, f"{CANCEL}#confirm" if request.htmx else CANCEL, context, status=status)


def _attention_action_or_404(request: HttpRequest, run_id, action_pk):
    action = selectors.action_by_id(action_pk, tenant=request.tenant)
    if action is None or str(action.run_id) != str(run_id):
        raise Http404("No such write in this run.")
    return action


def _attention_answer(request, run_id, *, ok: bool, text: str, status: int = 200) -> HttpResponse:
    """htmx: the run's live part with the outcome; else a flash message and the run page."""
    if request.htmx:
        outcome = {"ok": ok, "text": text}
        context = _run_context(request, _detail_or_404(request, run_id), attention=outcome)
        return render(request, f"{RUN}#run-live", context, status=status)
    messages.add_message(request, messages.SUCCESS if ok else messages.ERROR, text)
    return redirect("run_detail", run_id=run_id)


@require_POST
@tenant_member(*APPROVER_ROLES)
def action_retry_now(request: HttpRequest, run_id, action_pk) -> HttpResponse:
    action = _attention_action_or_404(request, run_id, action_pk)
    try:
        endings.action_retry_now(action_pk=action.pk, user=request.user)
    except RunsError as error:
        return _attention_answer(request, run_id, ok=False, text=str(error), status=409)
    text = f"{action.action_id} goes out again now under the same key."
    return _attention_answer(request, run_id, ok=True, text=text)


@require_POST
@tenant_member(*APPROVER_ROLES)
def action_give_up(request: HttpRequest, run_id, action_pk) -> HttpResponse:
    action = _attention_action_or_404(request, run_id, action_pk)
    form = GiveUpForm(request.POST)
    if not form.is_valid():
        text = "Say why you give up: the reason is recorded in the audit log."
        return _attention_answer(request, run_id, ok=False, text=text, status=422)
    try:
        became = endings.action_give_up(
            action_pk=action.pk, user=request.user, reason=form.cleaned_data["reason"]
        )
    except RunsError as error:
        return _attention_answer(request, run_id, ok=False, text=str(error), status=409)
    return _attention_answer(request, run_id, ok=True, text=GAVE_UP[became](action.action_id))


# What giving up answers, by what became of the write once its tool was asked by the key.
GAVE_UP = {
    "failed": "Gave up on {}.".format,
    "succeeded": (
        "{} was not given up: asked by its key, the tool holds it as done. "
        "Its receipt is recorded, and it counts as succeeded."
    ).format,
    "uncertain": (
        "{} was not given up: it may have been applied, and asked by its key the tool "
        "could not tell. It is in doubt: a reconciliation case is open."
    ).format,
}
