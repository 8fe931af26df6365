"""The page a decision link from an "approval requested" mail opens (runs.decision_links).

A GET shows the frozen intent (or the plan the link names) and the forms to confirm, and
decides nothing: mail scanners and link previews follow links. A POST decides through the
same service as the inbox, bound to the digest and state version the page showed, and uses
the link up. It needs a session as the link's approver unless the tool policy (for a plan:
each of its tools' policies) allows link-only decisions; signed in as anyone else, the link
is refused. Every refusal is a page of its own with a status that says why,
and leaves everything as it was.

A decided POST renders its outcome rather than redirecting: the link is used by then, so a
redirect back to it could only say "used".
"""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from control.foundation.audit import audit_record
from runs import selectors, services
from runs.decision_links import LinkClaims, LinkRefused, decision_link_read
from runs.exceptions import LinkUsed, RunsError
from runs.models import Action, Plan
from runs.pages.forms import PRESET_OPTIONS, ApproveForm, RejectForm
from runs.pages.presenters import MISSING_BINDING, InboxItem, Outcome, refusal

PAGE = "runs/action_decide_by_link.html"
PLAN_PAGE = "runs/plan_decide_by_link.html"
REFUSED = "runs/decision_link_refused.html"
USED = LinkRefused(
    "used",
    410,
    "This link was already used",
    "Each decision link decides once. Nothing more was decided. "
    "The request's state is in the inbox.",
)


def _target(request: HttpRequest, claims: LinkClaims) -> selectors.LinkTarget:
    """The link's request and approver, or the reason the link cannot decide on it."""
    target = selectors.decision_link_target(
        action_pk=claims.action_pk,
        approver_pk=claims.approver_pk,
        nonce=claims.nonce,
        plan_pk=claims.plan_pk,
    )
    if target is None:
        raise LinkRefused("gone", 404, "This request is not here", "Nothing was decided.")
    user = request.user
    if user.is_authenticated and user.pk != claims.approver_pk:
        raise LinkRefused(
            "someone_else",
            403,
            "This link was sent to someone else",
            f"You are signed in as {user.get_username()}; the link belongs to another "
            "person and decides only for them. Nothing was decided. "
            "Decide from your own mail or from the inbox.",
        )
    if target.used:
        raise USED
    _decided_with_its_plan(target)
    if target.plan is not None:
        _plan_still_waits(target.plan.plan, claims)
    else:
        _action_still_waits(target.action, claims)
    return target


def _decided_with_its_plan(target: selectors.LinkTarget) -> None:
    """A link decides a plan's item only as part of its plan (a link that names the plan):
    one that names the item alone would decide it without the rest."""
    if target.plan is not None:
        return
    try:
        services.refuse_plan_item(target.action)
    except RunsError as error:
        raise LinkRefused(
            "plan_item", 409, "This write is part of a plan", refusal(error).detail
        ) from None


def _action_still_waits(action: Action, claims: LinkClaims) -> None:
    if claims.intent_digest != action.intent_digest:
        raise LinkRefused("digest", 409, "This link names another intent", "Nothing was decided.")
    if action.status == Action.Status.SUPERSEDED:
        newer = getattr(action, "superseded_by", None)
        raise LinkRefused(
            "superseded",
            409,
            "This intent was superseded",
            f"It was edited into {newer.action_id if newer else 'a new intent'} with another "
            "digest; this link cannot decide on that one. Nothing was decided.",
        )
    if action.status != Action.Status.WAITING_APPROVAL:
        raise LinkRefused(
            "not_waiting",
            409,
            "This request no longer waits for a decision",
            f"It is {action.get_status_display().lower()}. Nothing was decided.",
        )
    _not_expired(action.expires_at)


def _plan_still_waits(plan: Plan, claims: LinkClaims) -> None:
    if claims.intent_digest != plan.digest:
        raise LinkRefused("digest", 409, "This link names another plan", "Nothing was decided.")
    if plan.status == Plan.Status.SUPERSEDED:
        raise LinkRefused(
            "superseded",
            409,
            "This plan was revised",
            "An operator dropped intents from it: a new version with another digest waits "
            "in the inbox, and this link cannot decide on it. Nothing was decided.",
        )
    if plan.status != Plan.Status.WAITING_APPROVAL:
        raise LinkRefused(
            "not_waiting",
            409,
            "This plan no longer waits for a decision",
            f"It is {plan.get_status_display().lower()}. Nothing was decided.",
        )
    _not_expired(plan.expires_at)


def _not_expired(expires_at) -> None:
    if expires_at is None or expires_at <= timezone.now():
        raise LinkRefused(
            "request_expired",
            410,
            "This request has expired",
            "It was never approved and will not run. Nothing was decided.",
        )


def _page(request, target, *, needs_login, outcome=None, reject_form=None, status=200):
    context = {
        "approver": target.approver,
        "needs_login": needs_login,
        "login_url": f"{reverse('login')}?next={request.get_full_path()}",
        "reject_form": reject_form or RejectForm(),
        "preset_options": PRESET_OPTIONS,
        "decided": outcome is not None and outcome.ok,
        "outcome": outcome,
    }
    if target.plan is not None:
        context["summary"] = target.plan
        context["approve_label"] = f"Confirm: approve all {target.plan.plan.size}"
        return render(request, PLAN_PAGE, context, status=status)
    now = timezone.now()
    context["item"] = InboxItem(target.action, now, target.approver.pk, outcome)
    return render(request, PAGE, context, status=status)


def _refused(request: HttpRequest, refused: LinkRefused) -> HttpResponse:
    if refused.status == 403:
        # Recorded like every 403, without the path: it holds the token, and an auditor
        # must not be able to read a link that may still decide.
        audit_record(
            actor=request.user.get_username(),
            verb="auth.denied",
            object_type="decision_link",
            reason=refused.rule,
            data={"method": request.method, "path": reverse("decision_link", args=["…"])},
        )
    context = {"refused": refused}
    return render(request, REFUSED, context, status=refused.status)


@require_http_methods(["GET", "POST"])
def decision_link(request: HttpRequest, token: str) -> HttpResponse:
    try:
        claims = decision_link_read(token)
        target = _target(request, claims)
    except LinkRefused as refused:
        return _refused(request, refused)
    signed_in = request.user.is_authenticated
    plan = target.plan.plan if target.plan else None
    needs_login = not signed_in and not services.link_only_allowed(target.action, plan)
    if request.method == "GET":
        return _page(request, target, needs_login=needs_login)
    if needs_login:
        return redirect_to_login(request.get_full_path())
    return _decide(request, claims, target, signed_in=signed_in)


def _decide(request, claims, target, *, signed_in: bool) -> HttpResponse:
    decision = request.POST.get("decision")
    form = (RejectForm if decision == "reject" else ApproveForm)(request.POST)
    if decision not in ("approve", "reject") or not form.is_valid():
        problem = form.non_field_errors()[0] if form.non_field_errors() else MISSING_BINDING
        return _page(
            request,
            target,
            needs_login=False,
            outcome=refusal(problem),
            reject_form=form if decision == "reject" else None,
            status=422,
        )
    binding = {
        "claims": claims,
        "action": target.action,
        "approver": target.approver,
        "logged_in": signed_in,
        "decision": decision,
        "seen_digest": form.cleaned_data["seen_digest"],
        "seen_state_version": form.cleaned_data["seen_state_version"],
        "seen_view": form.cleaned_data.get("seen_view", ""),
        "reason": form.cleaned_data.get("full_reason", ""),
    }
    if target.plan is not None:
        binding["plan"] = target.plan.plan
    try:
        services.decide_by_link(**binding)
    except LinkUsed:
        return _refused(request, USED)
    except RunsError as error:
        return _page(request, target, needs_login=False, outcome=refusal(error), status=409)
    fresh = selectors.decision_link_target(
        action_pk=claims.action_pk,
        approver_pk=claims.approver_pk,
        nonce=claims.nonce,
        plan_pk=claims.plan_pk,
    )
    target = fresh or target  # the page shows the decision it just recorded
    return _page(request, target, needs_login=False, outcome=_decided(target, decision))


def _decided(target: selectors.LinkTarget, decision: str) -> Outcome:
    if decision == "reject":
        return Outcome(True, "Rejected", "The agent reads your reason. This link is now used.")
    if target.plan is not None:
        plan = target.plan.plan
        if plan.status == Plan.Status.WAITING_APPROVAL:
            return Outcome(True, "Approved", "Waiting for another operator's approval.")
        return Outcome(
            True,
            f"Approved all {plan.size}",
            "Each goes to a worker in order, under its own key. This link is now used.",
        )
    if target.action.status == Action.Status.WAITING_APPROVAL:
        return Outcome(True, "Approved", "Waiting for another operator's approval.")
    return Outcome(True, "Approved", "Queued for a worker. This link is now used.")
