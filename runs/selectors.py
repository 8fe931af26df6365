"""Reads of runs and their parts; each owns its joins so callers never trigger N+1."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Exists, F, OuterRef, Prefetch, Q, QuerySet, Subquery

from control.models import Tenant
from runs.models import (
    OPEN_ACTION_STATUSES,
    Action,
    Approval,
    Attempt,
    Checkpoint,
    Lease,
    Observation,
    Receipt,
    Run,
    RunEvent,
    ToolPolicy,
)
from runs.tools.errors import UnsupportedTool
from runs.tools.registry import get_tool


def run_by_id(run_id: str, *, tenant=None) -> Run | None:
    try:
        pk = uuid.UUID(str(run_id))
    except ValueError:
        return None
    queryset = Run.objects.select_related("tenant")
    if tenant is not None:
        queryset = queryset.filter(tenant=tenant)
    return queryset.filter(pk=pk).first()


# --- Operator pages: the inbox and the run pages -------------------------------------------
# Each page is one keyset page of at most PAGE_SIZE rows plus a fixed number of prefetches,
# so a page costs the same number of queries with 5 rows or 500.

PAGE_SIZE = 50
EVENTS_PAGE_SIZE = 100
CHECKPOINTS_SHOWN = 10
EXPIRED_SHOWN = 20


@dataclass(frozen=True)
class InboxFilters:
    tool: str = ""
    run: str = ""
    proposer: str = ""
    search: str = ""

    def is_empty(self) -> bool:
        return not (self.tool or self.run or self.proposer or self.search)


@dataclass(frozen=True)
class Page:
    rows: list
    next_cursor: str = ""


def _approvals_prefetch() -> Prefetch:
    return Prefetch(
        "approvals", queryset=Approval.objects.select_related("approver").order_by("created_at")
    )


def _inbox_rows(tenant: Tenant, filters: InboxFilters) -> QuerySet[Action]:
    rows = Action.objects.filter(tenant=tenant).select_related("run", "observation")
    if filters.tool:
        rows = rows.filter(tool=filters.tool)
    if filters.run:
        try:
            rows = rows.filter(run_id=uuid.UUID(filters.run))
        except ValueError:
            return rows.none()
    if filters.proposer:
        rows = rows.filter(proposed_by=filters.proposer)
    if filters.search:
        term = filters.search
        rows = rows.filter(
            Q(target__icontains=term)
            | Q(tool__icontains=term)
            | Q(action_id__icontains=term)
            | Q(args__icontains=term)
            | Q(run__goal__icontains=term)
            | Q(observation__summary__icontains=term)
            | Q(intent_digest__icontains=term)
        )
    return rows


def _inbox_cursor(action: Action) -> str:
    return f"{action.expires_at.isoformat()}~{action.pk}"


def _after_inbox_cursor(rows: QuerySet[Action], cursor: str) -> QuerySet[Action]:
    try:
        moment, pk = cursor.split("~", 1)
        expires_at, pk = datetime.fromisoformat(moment), uuid.UUID(pk)
    except ValueError:
        return rows
    return rows.filter(Q(expires_at__gt=expires_at) | Q(expires_at=expires_at, pk__gt=pk))


def inbox_page(*, tenant: Tenant, filters: InboxFilters, after: str = "") -> Page:
    """Requests waiting for a decision, soonest to expire first (overdue ones lead: they show
    as expired, never approvable)."""
    rows = _inbox_rows(tenant, filters).filter(
        status=Action.Status.WAITING_APPROVAL, expires_at__isnull=False
    )
    if after:
        rows = _after_inbox_cursor(rows, after)
    found = list(
        rows.prefetch_related(_approvals_prefetch()).order_by("expires_at", "pk")[: PAGE_SIZE + 1]
    )
    more = len(found) > PAGE_SIZE
    found = found[:PAGE_SIZE]
    return Page(found, _inbox_cursor(found[-1]) if more else "")


def inbox_waiting_count(*, tenant: Tenant, filters: InboxFilters) -> int:
    return _inbox_rows(tenant, filters).filter(status=Action.Status.WAITING_APPROVAL).count()


def inbox_expired(*, tenant: Tenant, filters: InboxFilters) -> list[Action]:
    """Expired requests that can still be asked again: the run goes on (running) and nothing
    was proposed in it since."""
    later = Action.objects.filter(run=OuterRef("run"), created_at__gt=OuterRef("created_at"))
    rows = _inbox_rows(tenant, filters).filter(
        status=Action.Status.EXPIRED, run__phase=Run.Phase.RUNNING
    )
    return list(rows.filter(~Exists(later)).order_by("-expires_at", "pk")[:EXPIRED_SHOWN])


def inbox_proposers(*, tenant: Tenant) -> list[str]:
    rows = Action.objects.filter(tenant=tenant, status=Action.Status.WAITING_APPROVAL)
    return list(rows.order_by("proposed_by").values_list("proposed_by", flat=True).distinct())


def action_by_id(action_pk, *, tenant: Tenant) -> Action | None:
    """One action of the tenant with what deciding on it and showing it needs."""
    try:
        pk = uuid.UUID(str(action_pk))
    except ValueError:
        return None
    rows = Action.objects.filter(tenant=tenant, pk=pk)
    rows = rows.select_related("run", "run__tenant", "observation", "tenant")
    return rows.prefetch_related(_approvals_prefetch()).first()


def actions_by_ids(action_pks, *, tenant: Tenant) -> dict[str, Action]:
    rows = Action.objects.filter(tenant=tenant, pk__in=list(action_pks))
    rows = rows.select_related("run", "run__tenant", "observation", "tenant")
    return {str(action.pk): action for action in rows}


@dataclass(frozen=True)
class RunFilters:
    phase: str = ""
    tool: str = ""
    search: str = ""

    def is_empty(self) -> bool:
        return not (self.phase or self.tool or self.search)


def _after_run_cursor(rows: QuerySet[Run], cursor: str) -> QuerySet[Run]:
    try:
        moment, pk = cursor.split("~", 1)
        created_at, pk = datetime.fromisoformat(moment), uuid.UUID(pk)
    except ValueError:
        return rows
    return rows.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, pk__lt=pk))


def run_page(*, tenant: Tenant, filters: RunFilters, after: str = "") -> Page:
    """The tenant's runs, newest first, each with its open action (if any)."""
    rows = Run.objects.filter(tenant=tenant)
    if filters.phase:
        rows = rows.filter(phase=filters.phase)
    if filters.tool:
        rows = rows.filter(Exists(Action.objects.filter(run=OuterRef("pk"), tool=filters.tool)))
    if filters.search:
        rows = rows.filter(goal__icontains=filters.search)
    if after:
        rows = _after_run_cursor(rows, after)
    open_actions = Prefetch(
        "actions",
        queryset=Action.objects.filter(status__in=OPEN_ACTION_STATUSES),
        to_attr="open_actions",
    )
    found = list(
        rows.prefetch_related(open_actions).order_by("-created_at", "-pk")[: PAGE_SIZE + 1]
    )
    more = len(found) > PAGE_SIZE
    found = found[:PAGE_SIZE]
    cursor = f"{found[-1].created_at.isoformat()}~{found[-1].pk}" if more else ""
    return Page(found, cursor)


@dataclass(frozen=True)
class RunDetail:
    run: Run
    lease: Lease | None
    events: list[RunEvent]
    earlier_events_before: int | None
    checkpoints: list[Checkpoint]
    actions: list[Action]
    stop_event: RunEvent | None


def run_detail(run_id, *, tenant: Tenant, events_before: int | None = None) -> RunDetail | None:
    """Everything the run page shows, in a fixed number of queries whatever the run's size."""
    run = run_by_id(run_id, tenant=tenant)
    if run is None:
        return None
    lease = Lease.objects.filter(run=run).first()
    events = run.events.select_related("action").order_by("-seq")
    if events_before is not None:
        events = events.filter(seq__lt=events_before)
    window = list(events[: EVENTS_PAGE_SIZE + 1])
    earlier = window[EVENTS_PAGE_SIZE - 1].seq if len(window) > EVENTS_PAGE_SIZE else None
    actions = (
        run.actions.select_related("observation", "receipt", "supersedes")
        .prefetch_related(
            Prefetch("attempts", queryset=Attempt.objects.order_by("number")),
            _approvals_prefetch(),
        )
        .order_by("created_at", "pk")
    )
    stop_event = (
        run.events.filter(payload__has_key="report", type__startswith="run.")
        .order_by("-seq")
        .first()
    )
    return RunDetail(
        run=run,
        lease=lease,
        events=list(reversed(window[:EVENTS_PAGE_SIZE])),
        earlier_events_before=earlier,
        checkpoints=list(run.checkpoints.order_by("-state_version")[:CHECKPOINTS_SHOWN]),
        actions=list(actions),
        stop_event=stop_event,
    )


def tool_policies(*, tenant: Tenant) -> dict[str, ToolPolicy]:
    return {policy.tool: policy for policy in ToolPolicy.objects.filter(tenant=tenant)}


@dataclass(frozen=True)
class Policy:
    needs_approval: bool
    four_eyes: bool
    required_approvals: int
    approval_seconds: int


def policy_for(*, tenant: Tenant, tool: str) -> Policy:
    """The tenant's rule for a tool, or the tool's own default when none is set."""
    row = ToolPolicy.objects.filter(tenant=tenant, tool=tool).first()
    if row is not None:
        return Policy(
            row.needs_approval, row.four_eyes, row.required_approvals, row.approval_seconds
        )
    try:
        needs_approval = get_tool(tool).needs_approval
    except UnsupportedTool:
        needs_approval = True  # fail closed: a tool no longer registered needs a person
    return Policy(
        needs_approval=needs_approval,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=settings.COUNTERSIGN_APPROVAL_SECONDS,
    )


def run_effects_report(run: Run) -> dict:
    """What a stop or cancel reports: effects done (with receipts), in doubt, not started."""
    rows = run.actions.select_related("receipt").order_by("created_at")
    report: dict[str, list] = {"done": [], "in_doubt": [], "not_started": []}
    for action in rows:
        entry = {
            "action_id": action.action_id,
            "tool": action.tool,
            "target": action.target,
            "idempotency_key": action.idempotency_key,
            "status": action.status,
        }
        if action.status in (Action.Status.SUCCEEDED, Action.Status.SATISFIED):
            entry["receipt_id"] = action.receipt.receipt_id
            report["done"].append(entry)
        elif action.status in (Action.Status.IN_FLIGHT, Action.Status.UNCERTAIN):
            report["in_doubt"].append(entry)
        elif action.status in (
            Action.Status.WAITING_APPROVAL,
            Action.Status.APPROVED,
            Action.Status.RETRY_WAIT,
        ):
            report["not_started"].append(entry)
    return report


# --- The agent API's reads -------------------------------------------------------------------


def action_with_decisions(action_pk, *, tenant: Tenant) -> Action | None:
    """One action of the tenant with its receipt, lineage and decisions; None if not here."""
    try:
        pk = uuid.UUID(str(action_pk))
    except ValueError:
        return None
    return (
        Action.objects.filter(tenant=tenant, pk=pk)
        .select_related("receipt", "supersedes", "superseded_by")
        .prefetch_related("approvals__approver")
        .first()
    )


def action_status(action_pk) -> str:
    return Action.objects.filter(pk=action_pk).values_list("status", flat=True).get()


def latest_case(action: Action) -> dict | None:
    # The reverse relation of reconciliation's cases: runs never imports reconciliation.
    return action.cases.order_by("-opened_at").values("id", "status", "reason").first()


def runs_newest_first(*, tenant: Tenant, phase: str | None = None) -> QuerySet[Run]:
    runs = Run.objects.filter(tenant=tenant).order_by("-created_at", "-id")
    return runs if phase is None else runs.filter(phase=phase)


def observation_of_run(observation_id, *, run: Run) -> Observation | None:
    return Observation.objects.filter(tenant_id=run.tenant_id, run=run, pk=observation_id).first()


def approval_overrides(*, tenant: Tenant) -> dict[str, bool]:
    """needs_approval per tool where the tenant set a policy (the tool's default elsewhere)."""
    return dict(ToolPolicy.objects.filter(tenant=tenant).values_list("tool", "needs_approval"))


# --- The receipts ledger (/receipts/) ---------------------------------------------------

LEDGER_PAGE_SIZE = 50
PROVEN_STATUSES = (Action.Status.SUCCEEDED, Action.Status.SATISFIED)


@dataclass(frozen=True)
class LedgerPage:
    rows: list
    next_cursor: str = ""


def _receipts(tenant: Tenant) -> QuerySet[Receipt]:
    return Receipt.objects.filter(tenant=tenant, action__tenant=tenant).select_related("action")


def _sent_without_receipt(tenant: Tenant) -> QuerySet[Action]:
    attempts = Attempt.objects.filter(action=OuterRef("pk")).order_by("-number")
    return (
        Action.objects.filter(tenant=tenant, receipt__isnull=True)
        .filter(Exists(attempts))
        .annotate(
            last_attempt_status=Subquery(attempts.values("status")[:1]),
            last_attempt_started_at=Subquery(attempts.values("started_at")[:1]),
            last_attempt_error_class=Subquery(attempts.values("error_class")[:1]),
        )
    )


def ledger_rows(*, tenant: Tenant, view: str) -> QuerySet:
    """The rows of one view, ordered as the pages walk them."""
    if view == "unreceipted":
        return _sent_without_receipt(tenant).order_by("-created_at", "-pk")
    receipts = _receipts(tenant)
    if view == "unproven":
        receipts = receipts.exclude(action__status__in=PROVEN_STATUSES)
    elif view == "duplicates":
        shared = (
            Receipt.objects.filter(tenant=tenant)
            .exclude(idempotency_key="")
            .values("idempotency_key")
            .annotate(receipts=Count("pk"))
            .filter(receipts__gt=1)
            .values("idempotency_key")
        )
        return receipts.filter(idempotency_key__in=shared).order_by("idempotency_key", "pk")
    elif view == "mismatched":
        receipts = receipts.filter(
            ~Q(intent_digest=F("action__intent_digest"))
            | (~Q(idempotency_key="") & ~Q(idempotency_key=F("action__idempotency_key")))
        )
    elif view != "all":
        raise ValueError(f"unknown ledger view {view!r}")
    return receipts.order_by("-pk")


def _cursor(view: str, row) -> str:
    if view == "unreceipted":
        return f"{row.created_at.isoformat()}~{row.pk}"
    if view == "duplicates":
        return f"{row.pk}~{row.idempotency_key}"
    return str(row.pk)


def _after(view: str, rows: QuerySet, cursor: str) -> QuerySet:
    """Rows after `cursor` in the view's order; a cursor that does not parse starts over."""
    try:
        if view == "unreceipted":
            moment, pk = cursor.rsplit("~", 1)
            created_at, pk = datetime.fromisoformat(moment), uuid.UUID(pk)
            return rows.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, pk__lt=pk))
        if view == "duplicates":
            pk, key = cursor.split("~", 1)
            return rows.filter(Q(idempotency_key__gt=key) | Q(idempotency_key=key, pk__gt=int(pk)))
        return rows.filter(pk__lt=int(cursor))
    except ValueError:
        return rows


def ledger_page(*, tenant: Tenant, view: str, after: str = "") -> LedgerPage:
    """One page of a view: one query, whatever the page or the size of the ledger."""
    rows = ledger_rows(tenant=tenant, view=view)
    if after:
        rows = _after(view, rows, after)
    found = list(rows[: LEDGER_PAGE_SIZE + 1])
    more = len(found) > LEDGER_PAGE_SIZE
    found = found[:LEDGER_PAGE_SIZE]
    return LedgerPage(found, _cursor(view, found[-1]) if more else "")
