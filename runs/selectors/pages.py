"""Reads of the operator pages: the inbox and the run pages; each owns its joins."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.db.models.functions import JSONObject

from control.models import Tenant
from runs.models import (
    OPEN_ACTION_STATUSES,
    Action,
    Approval,
    Attempt,
    Checkpoint,
    Lease,
    McpSession,
    Run,
    RunEvent,
    StandingGrant,
    StandingGrantApproval,
    ToolPolicy,
)
from runs.patterns import refusal_of
from runs.record.signed_rows import POLICY_ROWS, RULE_ROWS

# Each page is one keyset page of at most PAGE_SIZE rows plus a fixed number of prefetches,
# so a page costs the same number of queries with 5 rows or 500.

PAGE_SIZE = 50
# The inbox's items are cards (arguments, observation, decision forms: ~5 KB of HTML each,
# the whole list re-rendered on every 10-second refresh); at 50 a page, rendering them was
# two thirds of the page's server time (docs/PERFORMANCE.md, pages at volume).
INBOX_PAGE_SIZE = 25
EVENTS_PAGE_SIZE = 100
CHECKPOINTS_SHOWN = 10
EXPIRED_SHOWN = 20


@dataclass(frozen=True)
class InboxFilters:
    tool: str = ""
    run: str = ""
    proposer: str = ""
    search: str = ""
    risk: int | None = None
    # Highest risk first (then soonest to expire) instead of soonest to expire.
    by_risk: bool = False

    def is_empty(self) -> bool:
        return not (self.tool or self.run or self.proposer or self.search or self.risk)


@dataclass(frozen=True)
class Page:
    rows: list
    next_cursor: str = ""


def _approvals_prefetch() -> Prefetch:
    return Prefetch(
        "approvals",
        queryset=Approval.objects.select_related("approver", "rule").order_by("created_at"),
    )


def _inbox_rows(tenant: Tenant, filters: InboxFilters) -> QuerySet[Action]:
    # A plan's items are decided as one: the inbox shows the plan (runs.selectors.plans).
    rows = Action.objects.filter(tenant=tenant, plan__isnull=True).select_related(
        "run", "observation"
    )
    if filters.tool:
        rows = rows.filter(tool=filters.tool)
    if filters.run:
        try:
            rows = rows.filter(run_id=uuid.UUID(filters.run))
        except ValueError:
            return rows.none()
    if filters.proposer:
        rows = rows.filter(proposed_by=filters.proposer)
    if filters.risk:
        rows = rows.filter(risk=filters.risk)
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


def _inbox_cursor(action: Action, *, by_risk: bool) -> str:
    place = f"{action.expires_at.isoformat()}~{action.pk}"
    return f"{action.risk}~{place}" if by_risk else place


def _after_inbox_cursor(rows: QuerySet[Action], cursor: str, *, by_risk: bool) -> QuerySet[Action]:
    try:
        if by_risk:
            risk_text, cursor = cursor.split("~", 1)
            risk = int(risk_text)
        moment, pk = cursor.split("~", 1)
        expires_at, pk = datetime.fromisoformat(moment), uuid.UUID(pk)
    except ValueError:
        return rows
    later = Q(expires_at__gt=expires_at) | Q(expires_at=expires_at, pk__gt=pk)
    if by_risk:
        return rows.filter(Q(risk__lt=risk) | Q(risk=risk) & later)
    return rows.filter(later)


def inbox_page(*, tenant: Tenant, filters: InboxFilters, after: str = "") -> Page:
    """Requests waiting for a decision, soonest to expire first (overdue ones lead: they show
    as expired, never approvable), or highest risk first and then soonest to expire."""
    rows = _inbox_rows(tenant, filters).filter(
        status=Action.Status.WAITING_APPROVAL, expires_at__isnull=False
    )
    by_risk = filters.by_risk
    if after:
        rows = _after_inbox_cursor(rows, after, by_risk=by_risk)
    order = ("-risk", "expires_at", "pk") if by_risk else ("expires_at", "pk")
    found = list(
        rows.prefetch_related(_approvals_prefetch()).order_by(*order)[: INBOX_PAGE_SIZE + 1]
    )
    more = len(found) > INBOX_PAGE_SIZE
    found = found[:INBOX_PAGE_SIZE]
    return Page(found, _inbox_cursor(found[-1], by_risk=by_risk) if more else "")


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


# A loose index scan of action_waiting_proposer: each step asks the index for the next name
# after the last one, so the list costs one probe per proposer, however many requests wait
# (SELECT DISTINCT reads every waiting request: 4 ms at 10,000). Django has no recursive CTE.
_PROPOSERS_SQL = """
WITH RECURSIVE proposer (name) AS (
    SELECT MIN(proposed_by) FROM {table} WHERE tenant_id = %s AND status = %s
  UNION ALL
    SELECT (
        SELECT MIN(proposed_by) FROM {table}
        WHERE tenant_id = %s AND status = %s AND proposed_by > proposer.name
    )
    FROM proposer WHERE proposer.name IS NOT NULL
)
SELECT name FROM proposer WHERE name IS NOT NULL
"""


def inbox_proposers(*, tenant: Tenant) -> list[str]:
    """Who proposed the requests waiting in this tenant (plans' items too), by name."""
    sql = _PROPOSERS_SQL.format(table=connection.ops.quote_name(Action._meta.db_table))
    tenant_id = Action._meta.get_field("tenant").get_db_prep_value(tenant.pk, connection)
    waiting = (tenant_id, Action.Status.WAITING_APPROVAL.value)
    with connection.cursor() as cursor:
        cursor.execute(sql, [*waiting, *waiting])  # the first name's, then each next one's
        return [name for (name,) in cursor.fetchall()]


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


def _compensated() -> Q:
    """A saga ended with every completed step undone (runs.services.saga: `saga.compensated`
    and no `saga.compensation_failed`), as `compensated` on each run."""
    events = RunEvent.objects.filter(run=OuterRef("pk"))
    return Exists(events.filter(type="saga.compensated")) & ~Exists(
        events.filter(type="saga.compensation_failed")
    )


def run_page(*, tenant: Tenant, filters: RunFilters, after: str = "") -> Page:
    """The tenant's runs, newest first, each with its open action (if any) and whether its
    saga was compensated."""
    rows = Run.objects.filter(tenant=tenant).annotate(compensated=_compensated())
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

    @property
    def completed(self) -> list[str]:
        """The logical ids of the run's writes that are done (succeeded, or satisfied by a
        read), in the order they were proposed. The run itself keeps only their count and
        digest (runs.record.completed)."""
        done = (Action.Status.SUCCEEDED, Action.Status.SATISFIED)
        return [action.action_id for action in self.actions if action.status in done]


def _run_with_mcp_session(run_id, *, tenant: Tenant) -> Run | None:
    """The run, and as `mcp_session` the MCP session it belongs to ({client, token, key})
    or None: in the run's own query."""
    try:
        pk = uuid.UUID(str(run_id))
    except ValueError:
        return None
    session = McpSession.objects.filter(run=OuterRef("pk")).order_by("created_at")
    described = JSONObject(client="client_name", token="token__name", key="key")
    return (
        Run.objects.select_related("tenant")
        .annotate(
            mcp_session=Subquery(session.values_list(described)[:1]), compensated=_compensated()
        )
        .filter(tenant=tenant, pk=pk)
        .first()
    )


def run_detail(run_id, *, tenant: Tenant, events_before: int | None = None) -> RunDetail | None:
    """Everything the run page shows, in a fixed number of queries whatever the run's size."""
    run = _run_with_mcp_session(run_id, tenant=tenant)
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


def standing_rules(*, tenant: Tenant) -> list[StandingGrant]:
    """The tenant's standing rules, newest first, with who proposed, approved and revoked."""
    approvals = StandingGrantApproval.objects.select_related("approver").order_by("created_at")
    rules = list(
        StandingGrant.objects.filter(tenant=tenant)
        .select_related("created_by", "revoked_by")
        .prefetch_related(Prefetch("approvals", queryset=approvals))
        .order_by("-created_at")
    )
    for rule in rules:
        # A rule stored before patterns were restricted, whose pattern has no linear form,
        # admits nothing (runs.services.standing): the page says so next to it.
        named = {"target_pattern": rule.target_pattern} if rule.target_pattern else {}
        for name, bound in rule.arg_bounds.items():
            if "pattern" in bound:
                named[f"arg_bounds.{name}.pattern"] = bound["pattern"]
        rule.pattern_refusal = refusal_of(named)
        rule.unverified = RULE_ROWS.problem(rule)  # the page says which approve nothing
    return rules


def tool_policies(*, tenant: Tenant) -> dict[str, ToolPolicy]:
    """The tenant's policy rows by tool, each with `unverified`: why its MAC does not verify
    (the page tells the admin to save it again), or ""."""
    policies = {policy.tool: policy for policy in ToolPolicy.objects.filter(tenant=tenant)}
    for policy in policies.values():
        policy.unverified = POLICY_ROWS.problem(policy)
    return policies
