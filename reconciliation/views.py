"""Reconciliation pages: the queue of writes whose outcome nobody could prove, and one case.

Each view: selector -> form -> one service -> response. Without htmx a POST redirects
(post/redirect/get, the outcome in a flash message); with htmx it renders the case's partial.
A refusal by a service answers 409 with the partial and the reason. Every role of the tenant
reads; only reconcilers and admins resolve or probe, and the services check that again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from control.foundation.tenancy import RECONCILER_ROLES
from control.web.pages import compact_json, pretty_json, tenant_member, with_query
from reconciliation import evidence, probes, selectors, services
from reconciliation.exceptions import InvalidTransition, NotAllowed, ReconciliationError
from reconciliation.forms import CaseFilterForm, ResolveForm
from reconciliation.models import ReconciliationCase
from runs.exceptions import RunsError
from runs.models import Attempt
from runs.pages.presenters import ActionView, IntentText
from runs.selectors import REASONS
from runs.services.saga import COMPENSATION_PREFIX

CASES = "reconciliation/case_list.html"
CASE = "reconciliation/case_detail.html"
Resolution = ReconciliationCase.Resolution
Status = ReconciliationCase.Status
REFUSAL_TITLES = {
    NotAllowed: "Not allowed",
    InvalidTransition: "Refused: the case has moved on",
}


@dataclass(frozen=True)
class Outcome:
    ok: bool
    title: str
    detail: str = ""
    link: str = ""
    link_text: str = ""


def sentence(text: str) -> str:
    """A service's message as a sentence; a leading tool name (notify.send) keeps its case."""
    text = text.strip()
    first = text.split(" ", 1)[0]
    if text and not any(mark in first for mark in "._:"):
        text = text[0].upper() + text[1:]
    return text if not text or text[-1] in ".!?" else text + "."


def refusal(error: Exception | str) -> Outcome:
    """How a refusal reads to the reconciler: what was refused, why, and that nothing changed."""
    title = REFUSAL_TITLES.get(type(error), "Refused")
    if isinstance(error, RunsError):
        title = "Refused by the run"
    return Outcome(False, title, f"{sentence(str(error))} Nothing was resolved.")


def may_reconcile(request: HttpRequest) -> bool:
    return bool(getattr(request, "roles", frozenset()) & RECONCILER_ROLES)


# --- The queue --------------------------------------------------------------------------------


@require_GET
@tenant_member()
def case_list(request: HttpRequest) -> HttpResponse:
    form = CaseFilterForm(request.GET)
    filters = selectors.CaseFilters(
        tool=form.value("tool"), reason=form.value("reason"), status=form.value("status")
    )
    after = request.GET.get("after", "")
    queue = selectors.case_queue(tenant=request.tenant, filters=filters, after=after)
    form.show_counts(queue.counts)
    context = {
        "filter_form": form,
        "filters": filters,
        "queue": queue,
        "cases": [CaseRow(case) for case in queue.page.rows],
        "probing": [CaseRow(case) for case in queue.probing],
        "first_page": not after,
        "next_url": with_query(reverse("case_list"), request.GET, after=queue.page.next_cursor)
        if queue.page.next_cursor
        else "",
        "list_url": with_query(reverse("case_list"), request.GET),
        "refreshed_at": timezone.now(),
    }
    template = f"{CASES}#case-table" if request.htmx and not request.htmx.boosted else CASES
    return render(request, template, context)


@dataclass
class CaseRow:
    """One case as a list shows it; `case` carries the selector's reason annotations."""

    case: ReconciliationCase

    def __getattr__(self, name: str):
        return getattr(self.case, name)

    @property
    def reason_label(self) -> str:
        return REASONS.get(self.case.reason_kind, self.case.reason)

    @property
    def why(self) -> str:
        """The transport's own words, else the case's detail."""
        return self.case.cause or self.case.detail


# --- One case ---------------------------------------------------------------------------------


@dataclass
class Finding:
    """One probe's result: the query by key and the read of the target, as recorded."""

    number: int
    raw: dict
    intent_digest: str
    # The earlier probe whose read was the same, so repeats show as one line.
    same_read_as: int | None = None

    @cached_property
    def at(self) -> datetime | None:
        try:
            return datetime.fromisoformat(self.raw.get("at", ""))
        except (TypeError, ValueError):
            return None

    @property
    def query(self):
        return self.raw.get("query")

    @property
    def query_is_receipt(self) -> bool:
        return isinstance(self.query, dict)

    @property
    def query_json(self) -> str:
        return pretty_json(self.query)

    @property
    def receipt_matches(self) -> bool:
        return self.query_is_receipt and self.query.get("intent_digest") == self.intent_digest

    @property
    def read(self):
        return self.raw.get("read")

    @property
    def read_is_state(self) -> bool:
        return isinstance(self.read, dict | list)

    @property
    def read_json(self) -> str:
        return pretty_json(self.read)


@dataclass
class AttemptRow:
    attempt: Attempt
    previous: Attempt | None

    def __getattr__(self, name: str):
        return getattr(self.attempt, name)

    @property
    def duration_ms(self) -> int | None:
        if self.attempt.finished_at is None:
            return None
        return _milliseconds(self.attempt.finished_at - self.attempt.started_at)

    @property
    def wait_ms(self) -> int | None:
        """Time since the previous attempt finished: the backoff actually waited."""
        if self.previous is None or self.previous.finished_at is None:
            return None
        return _milliseconds(self.attempt.started_at - self.previous.finished_at)


def _milliseconds(delta: timedelta) -> int:
    return max(0, round(delta.total_seconds() * 1000))


@dataclass
class CaseView(IntentText):
    """One case as the reconciler judges it; every value a template needs, computed here."""

    detail: selectors.CaseDetail
    user_pk: int | None
    now: datetime

    @property
    def case(self) -> ReconciliationCase:
        return self.detail.case

    @property
    def action(self):
        return self.case.action

    @property
    def run(self):
        return self.case.run

    @property
    def tool(self):
        return self.tool_text.tool

    @property
    def dedupes(self) -> bool:
        return bool(self.tool and self.tool.dedupes_by_key)

    @property
    def compensation(self) -> str:
        return (self.tool.compensation if self.tool else None) or ""

    @property
    def reason_label(self) -> str:
        return REASONS.get(self.case.reason_kind, self.case.reason)

    @cached_property
    def findings(self) -> list[Finding]:
        """Newest first."""
        rows: list[Finding] = []
        for number, raw in enumerate(self.case.findings or [], start=1):
            if not isinstance(raw, dict):
                continue
            finding = Finding(number, raw, self.action.intent_digest)
            if rows and rows[-1].read == finding.read:
                finding.same_read_as = rows[-1].same_read_as or rows[-1].number
            rows.append(finding)
        return list(reversed(rows))

    @cached_property
    def candidates(self) -> evidence.Candidates:
        """The records the probes read that could be this write, for the reconciler to pick."""
        since = getattr(self.case, "first_attempt_at", None)
        return evidence.candidates(self.case.findings, self.action, since=since)

    @cached_property
    def candidate_rows(self) -> list[tuple[evidence.Candidate, str]]:
        """Each candidate with its record as people read it."""
        return [(found, pretty_json(found.record)) for found in self.candidates.found]

    @property
    def latest(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    @cached_property
    def attempts(self) -> list[AttemptRow]:
        rows, previous = [], None
        for attempt in self.detail.attempts:
            rows.append(AttemptRow(attempt, previous))
            previous = attempt
        return rows

    @property
    def earlier_attempts(self) -> int:
        return max(self.action.attempt_count - len(self.detail.attempts), 0)

    @cached_property
    def other_effects(self) -> list[ActionView]:
        return [ActionView(action) for action in self.detail.other_actions]

    @cached_property
    def compensating(self):
        """The intent that undoes this one, once a compensation was proposed."""
        wanted = COMPENSATION_PREFIX + self.action.action_id
        return next((a for a in self.detail.other_actions if a.action_id == wanted), None)

    @cached_property
    def receipt(self):
        return getattr(self.action, "receipt", None)

    @property
    def evidence_json(self) -> str:
        return pretty_json(self.case.evidence) if self.case.evidence is not None else ""

    @property
    def proposed_evidence(self) -> str:
        """The proposal's evidence exactly as shown, for the confirmation to carry back."""
        return compact_json(self.case.evidence)

    @property
    def waiting(self) -> bool:
        return self.case.status in (Status.OPEN, Status.AWAITING_SECOND)

    @property
    def mine(self) -> bool:
        return self.case.proposed_by_id is not None and self.case.proposed_by_id == self.user_pk

    @property
    def probeable(self) -> bool:
        return self.case.status in (Status.OPEN, Status.PROBING)


def _resolve_forms(posted: ResolveForm | None) -> dict[str, ResolveForm]:
    """One form per resolution and one to confirm a proposal; a refused one comes back bound."""
    keys = [*Resolution.values, "confirm"]
    forms = {key: ResolveForm(auto_id=f"id_{key}_%s") for key in keys}
    if posted is not None and ResolveForm.panel_of(posted.data) in forms:
        forms[ResolveForm.panel_of(posted.data)] = posted
    return forms


def _case_context(request: HttpRequest, detail, *, outcome=None, posted=None) -> dict:
    return {
        "view": CaseView(detail, request.user.pk, timezone.now()),
        "case": detail.case,
        "forms": _resolve_forms(posted),
        "posted": posted,
        "outcome": outcome,
        "may_reconcile": may_reconcile(request),
        "inbox_url": f"{reverse('inbox')}?run={detail.case.run_id}",
    }


def _detail_or_404(request: HttpRequest, case_id) -> selectors.CaseDetail:
    detail = selectors.case_detail(case_id, tenant=request.tenant)
    if detail is None:
        raise Http404("No such case in this tenant.")
    return detail


@require_GET
@tenant_member()
def case_detail(request: HttpRequest, case_id) -> HttpResponse:
    detail = _detail_or_404(request, case_id)
    template = f"{CASE}#case-live" if request.htmx and not request.htmx.boosted else CASE
    return render(request, template, _case_context(request, detail))


def _case_response(
    request: HttpRequest, case_pk, outcome: Outcome, *, status: int = 200, posted=None
) -> HttpResponse:
    """htmx: the case, fresh from the database, with the outcome; else flash and redirect."""
    if request.htmx:
        context = _case_context(
            request, _detail_or_404(request, case_pk), outcome=outcome, posted=posted
        )
        return render(request, f"{CASE}#case-live", context, status=status)
    level = messages.SUCCESS if outcome.ok else messages.ERROR
    messages.add_message(request, level, f"{outcome.title}. {outcome.detail}".strip())
    return redirect("case_detail", case_id=case_pk)


@require_POST
@tenant_member(*RECONCILER_ROLES)
def case_resolve(request: HttpRequest, case_id) -> HttpResponse:
    case = _detail_or_404(request, case_id).case
    form = ResolveForm.posted(request.POST)
    if not form.is_valid():
        return _case_response(request, case.pk, refusal(form.problem()), status=422, posted=form)
    try:
        resolved = services.case_resolve(case=case, user=request.user, **form.resolution_kwargs())
    except (ReconciliationError, RunsError) as error:
        return _case_response(request, case.pk, refusal(error), status=409, posted=form)
    return _case_response(request, case.pk, _resolved_outcome(resolved))


def _resolved_outcome(case: ReconciliationCase) -> Outcome:
    action = case.action
    if case.status == Status.AWAITING_SECOND:
        return Outcome(
            True,
            "Proposed; waiting for a second reconciler",
            f"The tool's policy asks for four eyes: another reconciler must confirm "
            f"{case.get_resolution_display().lower()} before it takes effect.",
        )
    if case.resolution == Resolution.APPLIED:
        return Outcome(True, "Resolved as applied", "The evidence is recorded as the receipt.")
    if case.resolution == Resolution.NOT_APPLIED:
        how = "after your confirmed resend" if case.resend_confirmed else "which the tool dedupes"
        detail = f"A worker sends it again with the same key ({how}): {action.idempotency_key}."
        return Outcome(True, "Resolved as not applied", detail)
    if case.resolution == Resolution.COMPENSATE:
        detail = (
            f"The effect is recorded; {COMPENSATION_PREFIX}{action.action_id} waits for "
            "approval like any other write."
        )
        link = f"{reverse('inbox')}?run={case.run_id}"
        return Outcome(True, "Compensation proposed", detail, link, "Open it in the inbox")
    return Outcome(
        True,
        "Abandoned",
        f"The write failed and the run stopped as failed: {case.resolution_note}",
        reverse("run_detail", args=[case.run_id]),
        "See the run",
    )


@require_POST
@tenant_member(*RECONCILER_ROLES)
def case_probe_now(request: HttpRequest, case_id) -> HttpResponse:
    case = _detail_or_404(request, case_id).case
    try:
        probed = probes.case_probe_now(case=case, user=request.user)
    except ReconciliationError as error:
        return _case_response(request, case.pk, refusal(error), status=409)
    return _case_response(request, case.pk, _probe_outcome(case, probed=probed))


def _probe_outcome(case: ReconciliationCase, *, probed: bool) -> Outcome:
    if not probed:
        return Outcome(True, "A sweeper is probing it right now", "Reload in a moment.")
    if case.status == Status.RESOLVED:
        label = case.get_resolution_display().lower()
        return Outcome(True, f"Probed: proven {label}", sentence(case.resolution_note))
    return Outcome(
        True,
        "Probed: nothing proven",
        "The newest finding is first under Probe results; the case stays for a person.",
    )
