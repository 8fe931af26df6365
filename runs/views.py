"""Operator pages: the approval inbox, the run list and run page, and tool policies.

Each view: selector -> form -> one service -> response. Without htmx a POST redirects
(post/redirect/get, the outcome in a flash message); with htmx it renders the page's partial.
A refusal by a service answers 409 with the partial and the reason, so nothing is approved
that the operator did not see: every decision form carries the digest and state version shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import reswap, retarget, trigger_client_event

from control.models import Tenant
from control.tenancy import APPROVER_ROLES
from control.web import (
    ADMIN_ROLES,
    INBOX_READER_ROLES,
    can_decide,
    compact_json,
    pretty_json,
    safe_next,
    tenant_member,
)
from runs import selectors, services
from runs.checkpoints import checkpoint_verify
from runs.exceptions import CheckpointError, GrantMismatch, RunsError
from runs.forms import (
    PRESET_REASONS,
    ApproveForm,
    BulkForm,
    CancelForm,
    EditArgumentsForm,
    InboxFilterForm,
    RejectForm,
    RunFilterForm,
    ToolPolicyForm,
    argument_diff,
    tool_names,
)
from runs.models import TERMINAL_PHASES, Action, Approval, Run, RunEvent
from runs.tools.registry import get_tool

INBOX = "runs/action_inbox.html"
EDIT = "runs/action_edit.html"
RUNS = "runs/run_list.html"
RUN = "runs/run_detail.html"
CANCEL = "runs/run_cancel.html"
POLICIES = "runs/toolpolicy_list.html"
MISSING_BINDING = (
    "The form did not carry the digest and state version you saw, so nothing was decided. "
    "Reload the inbox and look again."
)
REFUSAL_TITLES = {
    "digest": "Refused: the intent is not the one you saw",
    "state_version": "Refused: the run changed since you looked",
    "expired": "Refused: the request has expired",
}


# --- What the pages show --------------------------------------------------------------------


@dataclass
class Outcome:
    ok: bool
    title: str
    detail: str = ""
    diff: list = field(default_factory=list)


@dataclass
class InboxItem:
    """One request as the operator judges it; every value a template needs, computed here."""

    action: Action
    now: datetime
    user_pk: int | None
    outcome: Outcome | None = None

    @cached_property
    def run(self) -> Run:
        return self.action.run

    @cached_property
    def args_json(self) -> str:
        return pretty_json(self.action.args)

    @cached_property
    def plan_text(self) -> str:
        plan = self.run.plan or {}
        if isinstance(plan.get("summary"), str):
            return plan["summary"]
        if isinstance(plan.get("steps"), list):
            return " → ".join(str(step) for step in plan["steps"])
        return compact_json(plan) if plan else ""

    @cached_property
    def budget_left(self) -> int | None:
        if self.run.budget_limit is None:
            return None
        return max(self.run.budget_limit - self.run.budget_used, 0)

    @cached_property
    def grants(self) -> list[Approval]:
        return [a for a in self.action.approvals.all() if a.decision == Approval.Decision.APPROVE]

    @property
    def missing_approvals(self) -> int:
        return max(self.action.required_approvals - len(self.grants), 0)

    @cached_property
    def mine(self) -> Approval | None:
        return next((a for a in self.action.approvals.all() if a.approver_id == self.user_pk), None)

    @property
    def waiting(self) -> bool:
        return self.action.status == Action.Status.WAITING_APPROVAL

    @property
    def expired(self) -> bool:
        return self.action.status == Action.Status.EXPIRED or (
            self.waiting
            and self.action.expires_at is not None
            and self.action.expires_at <= self.now
        )

    @property
    def decidable(self) -> bool:
        return self.waiting and not self.expired and self.mine is None

    @property
    def run_moved(self) -> bool:
        """The run changed after the proposal by more than this request's own grants."""
        return self.waiting and self.run.state_version != self.action.base_version + len(
            self.grants
        )

    @property
    def selection(self) -> str:
        return f"{self.action.pk}/{self.action.base_version}/{self.action.intent_digest}"


def _items(request: HttpRequest, actions, outcome: Outcome | None = None) -> list[InboxItem]:
    now = timezone.now()
    return [InboxItem(action, now, request.user.pk, outcome) for action in actions]


def sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def refusal(error: RunsError | str) -> Outcome:
    """How a refusal reads to the operator: what was refused, why, and that nothing happened."""
    if isinstance(error, str):
        return Outcome(False, "Nothing was decided", sentence(error))
    if isinstance(error, GrantMismatch):
        title = REFUSAL_TITLES.get(error.rule, "Refused: the grant does not bind")
        return Outcome(False, title, f"{sentence(str(error))} Nothing was approved.")
    return Outcome(False, "Refused", f"{sentence(str(error))} Nothing was decided.")


# --- The inbox --------------------------------------------------------------------------------


def _inbox_filters(request: HttpRequest, query) -> tuple[InboxFilterForm, selectors.InboxFilters]:
    proposers = selectors.inbox_proposers(tenant=request.tenant)
    form = InboxFilterForm(query, proposers=proposers)
    filters = selectors.InboxFilters(
        tool=form.value("tool"),
        run=form.value("run"),
        proposer=form.value("proposer"),
        search=form.value("q"),
    )
    return form, filters


def _inbox_context(request: HttpRequest, query) -> dict:
    form, filters = _inbox_filters(request, query)
    after = query.get("after", "")
    page = selectors.inbox_page(tenant=request.tenant, filters=filters, after=after)
    expired = [] if after else selectors.inbox_expired(tenant=request.tenant, filters=filters)
    return {
        "filter_form": form,
        "filters": filters,
        "items": _items(request, page.rows),
        "expired_items": _items(request, expired),
        "waiting_count": selectors.inbox_waiting_count(tenant=request.tenant, filters=filters),
        "next_url": _with_query(reverse("inbox"), query, after=page.next_cursor)
        if page.next_cursor
        else "",
        "list_url": _with_query(reverse("inbox"), query),
        "can_decide": can_decide(request),
        "preset_reasons": PRESET_REASONS,
        "refreshed_at": timezone.now(),
    }


def _with_query(path: str, query, **changes) -> str:
    params = {key: value for key, value in query.items() if value and key not in changes}
    params.update({key: value for key, value in changes.items() if value})
    return f"{path}?{urlencode(params)}" if params else path


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
        item = _items(request, [fresh], outcome)[0]
        context = {"item": item, "can_decide": True, "preset_reasons": PRESET_REASONS}
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
    binding = {"seen_digest": action.intent_digest, "seen_state_version": action.base_version}
    data = request.POST if request.method == "POST" else None
    return EditArgumentsForm(data, action=action, initial=binding)


def _edit_page(request, action, form, *, outcome=None, status=200) -> HttpResponse:
    valid = form.is_bound and form.is_valid()
    diff = argument_diff(action.args, form.edited_args()) if valid else []
    context = {
        "item": _items(request, [action])[0],
        "form": form,
        "diff": diff,
        "outcome": outcome,
        "reviewing": valid and outcome is None,
        "next_url": _inbox_return(request),
    }
    return render(request, f"{EDIT}#edit-form" if request.htmx else EDIT, context, status=status)


@require_http_methods(["GET", "POST"])
@tenant_member(*APPROVER_ROLES)
def inbox_edit(request: HttpRequest, action_pk) -> HttpResponse:
    action = _action_or_404(request, action_pk)
    form = _edit_form(request, action)
    if request.method == "GET" or not form.is_valid() or request.POST.get("step") != "approve":
        return _edit_page(request, action, form, status=200 if not form.errors else 422)
    try:
        edited = services.action_edit_and_approve(
            action=action,
            editor=request.user,
            args=form.edited_args(),
            seen_digest=form.cleaned_data["seen_digest"],
            seen_state_version=form.cleaned_data["seen_state_version"],
            reason=form.cleaned_data["edit_reason"],
        )
    except RunsError as error:
        return _edit_page(request, action, form, outcome=refusal(error), status=409)
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


# --- Runs -------------------------------------------------------------------------------------


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
        "next_url": _with_query(reverse("run_list"), request.GET, after=page.next_cursor)
        if page.next_cursor
        else "",
    }
    template = f"{RUNS}#run-table" if request.htmx and not request.htmx.boosted else RUNS
    return render(request, template, context)


@dataclass
class CheckpointView:
    checkpoint: object
    verified: bool
    problem: str = ""


@dataclass
class ActionView:
    action: Action

    @cached_property
    def args_json(self) -> str:
        return pretty_json(self.action.args)

    @cached_property
    def receipt(self):
        return getattr(self.action, "receipt", None)

    @property
    def receipt_matches(self) -> bool:
        return self.receipt is not None and self.receipt.intent_digest == self.action.intent_digest


@dataclass
class EventView:
    event: RunEvent

    def __getattr__(self, name: str):
        return getattr(self.event, name)

    @cached_property
    def payload_json(self) -> str:
        return pretty_json(self.event.payload)


def _verify(checkpoints, run: Run) -> list[CheckpointView]:
    """The latest checkpoint must also be the run's current state; older ones must verify."""
    views = []
    for index, checkpoint in enumerate(checkpoints):
        try:
            checkpoint_verify(checkpoint.body, run=run if index == 0 else None)
        except CheckpointError as error:
            views.append(CheckpointView(checkpoint, False, str(error)))
        else:
            views.append(CheckpointView(checkpoint, True))
    return views


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
        "checkpoints": _verify(detail.checkpoints, run),
        "actions": [ActionView(action) for action in detail.actions],
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
        services.run_cancel(
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
        "report": services.run_effects_report(run),
        "error": error,
        "terminal": run.phase in TERMINAL_PHASES,
    }
    return render(request, f"{CANCEL}#confirm" if request.htmx else CANCEL, context, status=status)


# --- Tool policies ----------------------------------------------------------------------------


@transaction.atomic
def _policy_forms(tenant: Tenant, posted: ToolPolicyForm | None = None) -> list[ToolPolicyForm]:
    stored = selectors.tool_policies(tenant=tenant)
    forms = []
    for tool in tool_names():
        if posted is not None and posted.data.get("tool") == tool:
            posted.tool_name, posted.slug, posted.stored = tool, _slug(tool), tool in stored
            forms.append(posted)
            continue
        policy = stored.get(tool)
        initial = {
            "tool": tool,
            "needs_approval": policy.needs_approval if policy else get_tool(tool).needs_approval,
            "four_eyes": policy.four_eyes if policy else False,
            "required_approvals": policy.required_approvals if policy else 1,
            "approval_minutes": max(
                1,
                (policy.approval_seconds if policy else settings.COUNTERSIGN_APPROVAL_SECONDS)
                // 60,
            ),
        }
        form = ToolPolicyForm(initial=initial, auto_id=policy_field_id(tool))
        form.tool_name, form.slug, form.stored = tool, _slug(tool), policy is not None
        forms.append(form)
    return forms


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
                actor=request.user.get_username(),
            )
            messages.success(request, f"Saved the policy for {data['tool']}.")
            return redirect("tool_policies")
    context = {"forms": _policy_forms(request.tenant, posted)}
    return render(request, POLICIES, context, status=422 if posted is not None else 200)
