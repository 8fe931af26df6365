"""Reads of reconciliation cases for the pages; each owns its joins so templates never query.

The queue is one keyset page of cases waiting for a person (oldest first: age is priority),
the cases still being probed apart, and the counts of all unresolved cases by status, tool and
reason in one grouped query. So the queue costs the same with 5 cases or 5,000.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery

from control.models import AuditEntry, Tenant
from reconciliation.models import ReconciliationCase
from runs.models import Action, Attempt
from runs.selectors import Page, policy_for, with_reasons
from runs.tools.errors import ToolError

PAGE_SIZE = 50
PROBING_SHOWN = 20
ATTEMPTS_SHOWN = 100
OTHER_EFFECTS_SHOWN = 100

Status = ReconciliationCase.Status
WAITING_FOR_A_PERSON = (Status.OPEN, Status.AWAITING_SECOND)
UNRESOLVED = (Status.PROBING, Status.OPEN, Status.AWAITING_SECOND)


@dataclass(frozen=True)
class CaseFilters:
    tool: str = ""
    reason: str = ""
    status: str = ""

    def is_empty(self) -> bool:
        return not (self.tool or self.reason or self.status)

    def admits(self, *, status: str, tool: str, reason: str) -> bool:
        return (
            (not self.tool or tool == self.tool)
            and (not self.reason or reason == self.reason)
            and (not self.status or status == self.status)
        )


@dataclass(frozen=True)
class CaseCounts:
    """Unresolved cases of the tenant, by status, tool and reason, from one grouped query."""

    by_status: Counter = field(default_factory=Counter)
    by_tool: Counter = field(default_factory=Counter)
    by_reason: Counter = field(default_factory=Counter)
    matching: int = 0  # waiting for a person and admitted by the filters
    probing_matching: int = 0

    @property
    def waiting(self) -> int:
        return self.by_status[Status.OPEN] + self.by_status[Status.AWAITING_SECOND]


@dataclass(frozen=True)
class Queue:
    page: Page
    probing: list[ReconciliationCase]
    counts: CaseCounts


def _queue_rows(tenant: Tenant, filters: CaseFilters) -> QuerySet[ReconciliationCase]:
    rows = with_reasons(ReconciliationCase.objects.filter(tenant=tenant))
    rows = rows.select_related("action", "run", "proposed_by")
    if filters.tool:
        rows = rows.filter(action__tool=filters.tool)
    if filters.reason:
        rows = rows.filter(reason_kind=filters.reason)
    return rows


def _after_cursor(rows: QuerySet[ReconciliationCase], cursor: str):
    try:
        moment, pk = cursor.split("~", 1)
        opened_at, pk = datetime.fromisoformat(moment), uuid.UUID(pk)
    except ValueError:
        return rows
    return rows.filter(Q(opened_at__gt=opened_at) | Q(opened_at=opened_at, pk__gt=pk))


def case_counts(*, tenant: Tenant, filters: CaseFilters) -> CaseCounts:
    groups = (
        with_reasons(ReconciliationCase.objects.filter(tenant=tenant, status__in=UNRESOLVED))
        .values("status", "action__tool", "reason_kind")
        .annotate(count=Count("pk"))
        .order_by()
    )
    by_status, by_tool, by_reason = Counter(), Counter(), Counter()
    matching = probing_matching = 0
    for group in groups:
        status, tool, reason, count = (
            group["status"],
            group["action__tool"],
            group["reason_kind"],
            group["count"],
        )
        by_status[status] += count
        if status == Status.PROBING:
            if filters.admits(status="", tool=tool, reason=reason):
                probing_matching += count
            continue
        by_tool[tool] += count
        by_reason[reason] += count
        if filters.admits(status=status, tool=tool, reason=reason):
            matching += count
    return CaseCounts(by_status, by_tool, by_reason, matching, probing_matching)


def case_queue(*, tenant: Tenant, filters: CaseFilters, after: str = "") -> Queue:
    """Cases waiting for a person, oldest first; and those still probed automatically."""
    rows = _queue_rows(tenant, filters)
    waiting = rows.filter(status__in=[filters.status] if filters.status else WAITING_FOR_A_PERSON)
    if after:
        waiting = _after_cursor(waiting, after)
    found = list(waiting.order_by("opened_at", "pk")[: PAGE_SIZE + 1])
    more = len(found) > PAGE_SIZE
    found = found[:PAGE_SIZE]
    cursor = f"{found[-1].opened_at.isoformat()}~{found[-1].pk}" if more else ""
    probing = []
    if not after and not filters.status:
        probing = list(
            rows.filter(status=Status.PROBING).order_by("next_probe_at", "pk")[:PROBING_SHOWN]
        )
    return Queue(Page(found, cursor), probing, case_counts(tenant=tenant, filters=filters))


@dataclass(frozen=True)
class CaseDetail:
    case: ReconciliationCase
    attempts: list[Attempt]
    other_actions: list[Action]
    history: list[AuditEntry]
    four_eyes: bool


def _first_attempts(action_pk):
    return Attempt.objects.filter(action_id=action_pk).order_by("number").values("started_at")


def first_attempt_started(action_pk) -> datetime | None:
    """When the write was first sent: a record created before cannot be its effect."""
    return _first_attempts(action_pk).values_list("started_at", flat=True).first()


def case_by_id(case_id, *, tenant: Tenant) -> ReconciliationCase | None:
    """The case with what its page reads beside it, `first_attempt_at` included."""
    try:
        pk = uuid.UUID(str(case_id))
    except ValueError:
        return None
    rows = with_reasons(ReconciliationCase.objects.filter(tenant=tenant, pk=pk)).annotate(
        first_attempt_at=Subquery(_first_attempts(OuterRef("action_id"))[:1])
    )
    rows = rows.select_related(
        "tenant",
        "run",
        "action",
        "action__observation",
        "action__receipt",
        "proposed_by",
        "resolved_by",
    )
    return rows.first()


def case_detail(case_id, *, tenant: Tenant) -> CaseDetail | None:
    """Everything the case page shows, in a fixed number of queries whatever its size."""
    case = case_by_id(case_id, tenant=tenant)
    if case is None:
        return None
    attempts = list(case.action.attempts.order_by("-number")[:ATTEMPTS_SHOWN])
    others = (
        Action.objects.filter(run_id=case.run_id)
        .exclude(pk=case.action_id)
        .select_related("receipt")
        .order_by("created_at", "pk")[:OTHER_EFFECTS_SHOWN]
    )
    history = AuditEntry.objects.filter(
        tenant=tenant, object_type="case", object_id=str(case.pk)
    ).order_by("seq")
    return CaseDetail(
        case=case,
        attempts=list(reversed(attempts)),
        other_actions=list(others),
        history=list(history),
        four_eyes=case_needs_four_eyes(case),
    )


def policy_four_eyes(*, tenant: Tenant, tool: str) -> bool:
    """Whether the tool's policy in the tenant asks a second reconciler to confirm, now."""
    try:
        return policy_for(tenant=tenant, tool=tool).four_eyes
    except ToolError:
        return False


def case_needs_four_eyes(case: ReconciliationCase) -> bool:
    """Whether a second reconciler must confirm: the rule frozen when the case opened, or the
    tool's policy now when that is stricter. Four eyes only ever adds a person, so a policy
    tightened after the case opened applies at once, while one relaxed after it never lets
    the proposer (or anyone alone) resolve a case opened under four eyes, nor one a first
    reconciler already proposed a resolution for."""
    if case.four_eyes_at_open or case.status == ReconciliationCase.Status.AWAITING_SECOND:
        return True
    return policy_four_eyes(tenant=case.tenant, tool=case.action.tool)
