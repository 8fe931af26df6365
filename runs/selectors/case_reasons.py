"""Why an unknown outcome is unknown, as a reconciler names it: for the case queue and pages
(reconciliation) and for the API and the MCP gateway (runs), from one set of rules.

Workers store a coarse error class (`tool_result_uncertain`, or `transient` for an answered
5xx of a write that may not be resent) and, on the attempt, the transport's own words; these
rules read both. The first rule that matches wins. runs never imports reconciliation: the
cases are reached through Action's reverse relation.
"""

from __future__ import annotations

from django.db.models import Case, CharField, F, OuterRef, Q, QuerySet, Subquery, Value, When
from django.db.models.functions import Coalesce

from runs.models import Action, Attempt

REASONS = {
    "timeout_after_send": "timeout after send",
    "dropped_connection": "dropped connection",
    "malformed_answer": "malformed answer",
    "receipt_digest_mismatch": "receipt digest mismatch",
    "gateway_error": "gateway error after send",
    "crash_after_send": "worker stopped after sending",
    "tool_crashed": "the tool crashed",
    "unknown": "outcome unknown",
}
_BY_REASON = {"receipt_digest_mismatch", "crash_after_send", "tool_crashed"}
_BY_CAUSE = (
    ("timeout_after_send", ("in time", "timed out")),
    ("dropped_connection", ("failed after sending", "cut short", "dropped")),
    ("malformed_answer", ("usable receipt", "malformed", "unexpected http")),
    ("gateway_error", ("http 502", "http 503", "http 504")),
)


def _cause() -> Coalesce:
    """The words of the attempt whose outcome became unknown (its latest uncertain one); once
    a resolution settled that attempt, the case's own detail."""
    uncertain = Attempt.objects.filter(
        action=OuterRef("action_id"), status=Attempt.Status.UNCERTAIN
    ).order_by("-number")
    return Coalesce(Subquery(uncertain.values("error")[:1]), F("detail"))


def _reason_kind() -> Case:
    whens = [When(reason=kind, then=Value(kind)) for kind in sorted(_BY_REASON)]
    for kind, words in _BY_CAUSE:
        matches = Q()
        for word in words:
            matches |= Q(cause__icontains=word)
        whens.append(When(matches, then=Value(kind)))
    return Case(*whens, default=Value("unknown"), output_field=CharField())


def with_reasons(cases: QuerySet) -> QuerySet:
    """Adds `cause` (the transport's words) and `reason_kind` (a key of REASONS)."""
    return cases.annotate(cause=_cause()).annotate(reason_kind=_reason_kind())


def cases_with_reasons() -> QuerySet:
    """Every reconciliation case, with its reason (runs reaches the model through Action)."""
    return with_reasons(Action.cases.field.model.objects.all())
