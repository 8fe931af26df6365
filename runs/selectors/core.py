"""Reads the services and the workers share: a run by id, the policy for a tool, the
effects report, the workers' due queue, and the agent API's reads."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet
from django.db.models.functions import Now

from control.models import Tenant
from runs.models import (
    OPEN_ACTION_STATUSES,
    Action,
    Approval,
    Observation,
    Risk,
    Run,
    ToolPolicy,
)
from runs.record.signed_rows import POLICY_ROWS
from runs.selectors.case_reasons import REASONS, cases_with_reasons
from runs.selectors.connectors import connectors_enabled, default_needs_approval, tenant_tool
from runs.tools.base import Tool
from runs.tools.errors import ToolError, UnsupportedTool
from runs.tools.registry import all_tools, get_tool


def run_by_id(run_id: str, *, tenant=None) -> Run | None:
    try:
        pk = uuid.UUID(str(run_id))
    except ValueError:
        return None
    queryset = Run.objects.select_related("tenant")
    if tenant is not None:
        queryset = queryset.filter(tenant=tenant)
    return queryset.filter(pk=pk).first()


def completed_action_ids(runs: list[Run]) -> dict:
    """Each run's completed actions (receipt or satisfied read), in the order of their
    receipts, keyed by run id; one query for all of `runs`."""
    completed: dict = {run.pk: [] for run in runs}
    rows = (
        Action.objects.filter(run__in=runs, status__in=["succeeded", "satisfied"])
        .order_by("receipt__created_at", "pk")
        .values_list("run_id", "action_id")
    )
    for run_id, action_id in rows:
        completed[run_id].append(action_id)
    return completed


@dataclass(frozen=True)
class Policy:
    needs_approval: bool
    four_eyes: bool
    required_approvals: int
    approval_seconds: int
    standing_grants_allowed: bool = True
    # Why the tenant's policy row was not trusted (control.foundation.row_signing), or ""
    # when it was.
    problem: str = ""
    risk: int = Risk.HIGH


def risk_of(tool: Tool | None) -> int:
    """A tool's risk by its nature, where the tenant has not rated it: a read is low; a write
    nothing undoes and a resend repeats (a message sent) is irreversible; any other write is
    high. An unknown tool is high."""
    if tool is None:
        return Risk.HIGH
    if tool.effect_class == "read_only":
        return Risk.LOW
    if tool.effect_class == "not_retriable" and not tool.compensation:
        return Risk.IRREVERSIBLE
    return Risk.HIGH


def policy_for(*, tenant: Tenant, tool: str) -> Policy:
    """The tenant's rule for a tool, or the tool's own default when none is set.

    A row that does not verify (written around the services, or altered) is read as the
    strictest policy it could be: a person must approve, never the proposer alone, with at
    least the approvals and at most the time the row names, and no standing rule may stand
    in. Its `problem` says why, for the proposal's event and audit entry."""
    row = ToolPolicy.objects.filter(tenant=tenant, tool=tool).first()
    if row is not None:
        problem = POLICY_ROWS.problem(row)
        if problem:
            return Policy(
                needs_approval=True,
                four_eyes=True,
                required_approvals=max(row.required_approvals, 1),
                approval_seconds=max(
                    min(row.approval_seconds, settings.COUNTERSIGN_APPROVAL_SECONDS), 1
                ),
                standing_grants_allowed=False,
                problem=problem,
                risk=Risk.IRREVERSIBLE,
            )
        return Policy(
            row.needs_approval,
            row.four_eyes,
            row.required_approvals,
            row.approval_seconds,
            row.standing_grants_allowed,
            risk=row.risk or nature_risk(tool),
        )
    # No row: the tool's definition decides, from the connector file, with the tenant's
    # enablement of its connector (signed: runs.record.signed_rows).
    enabled = connectors_enabled(tenant=tenant)
    try:
        adapter = tenant_tool(tenant=tenant, name=tool, enabled=enabled)
    except UnsupportedTool:
        # Fail closed: a tool no longer registered, or not enabled here, needs a person.
        needs_approval, risk = True, risk_of(None)
    else:
        reads = enabled[adapter.connector]
        needs_approval = default_needs_approval(adapter, reads_without_approval=reads)
        risk = risk_of(adapter)
    return Policy(
        needs_approval=needs_approval,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=settings.COUNTERSIGN_APPROVAL_SECONDS,
        risk=risk,
    )


def nature_risk(tool: str) -> int:
    """risk_of the tool of that name as this server has it (high for one it no longer has)."""
    try:
        return risk_of(get_tool(tool))
    except ToolError:
        return risk_of(None)


def verified_policies(queryset: QuerySet[ToolPolicy]) -> list[ToolPolicy]:
    """The policy rows of `queryset` that verify: what escalation and link-only decisions
    may act on (a forged row must not mail its own contacts nor let a link decide)."""
    return [row for row in queryset if POLICY_ROWS.verifies(row)]


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
            Action.Status.NEEDS_ATTENTION,
        ):
            report["not_started"].append(entry)
    return report


def ready_actions() -> QuerySet[Action]:
    """Approved, or waiting for a retry whose time has come: read through the ready-queue
    partial index (action_ready_queue), however many actions the table holds. A plan's item
    is ready only once every item before it is settled: its items go one at a time, in
    order, and one in doubt holds back the rest."""
    # Asked only of a plan's items, and of their run's open intents (a plan's items are all
    # of its run): as `plan IS NULL OR NOT EXISTS` it stays a subplan that single intents
    # never run and an item runs over action_open_by_run. As a bare NOT EXISTS it became an
    # anti-join, which a planner whose statistics predate a burst of approvals ran against
    # every open intent for every candidate (30 ms a claim at 5,000 ready, 0.7 ms now).
    earlier_open = Action.objects.filter(
        run_id=OuterRef("run_id"),
        plan_id=OuterRef("plan_id"),
        position__lt=OuterRef("position"),
        status__in=OPEN_ACTION_STATUSES,
    )
    return Action.objects.filter(
        Q(plan__isnull=True) | ~Exists(earlier_open),
        status__in=[Action.Status.APPROVED, Action.Status.RETRY_WAIT],
        next_attempt_at__lte=Now(),
    )


def orphaned_actions() -> QuerySet[Action]:
    """Left in flight by a worker whose lease expired (or is gone), once any query backoff
    has passed: read through the in-flight partial index (action_in_flight)."""
    return Action.objects.filter(
        Q(status=Action.Status.IN_FLIGHT)
        & (Q(run__lease__expires_at__lte=Now()) | Q(run__lease__expires_at__isnull=True))
        & (Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=Now()))
    )


def any_action_due() -> bool:
    """Is any action ready or orphaned now? Two index-backed probes, never a table scan."""
    return ready_actions().exists() or orphaned_actions().exists()


def plan_items(plan) -> list[Action]:
    """A plan's intents in order, with what the API shows of each (receipt, decisions)."""
    return list(
        plan.items.order_by("position")
        .select_related("receipt", "supersedes", "superseded_by")
        .prefetch_related(
            Prefetch("approvals", queryset=Approval.objects.select_related("rule")),
            Prefetch("cases", queryset=cases_with_reasons()),
        )
    )


def action_with_decisions(action_pk, *, tenant: Tenant) -> Action | None:
    """One action of the tenant with its receipt, lineage and decisions; None if not here."""
    try:
        pk = uuid.UUID(str(action_pk))
    except ValueError:
        return None
    return (
        Action.objects.filter(tenant=tenant, pk=pk)
        .select_related("receipt", "supersedes", "superseded_by")
        .prefetch_related(Prefetch("approvals", queryset=Approval.objects.select_related("rule")))
        .first()
    )


def action_status(action_pk) -> str:
    return Action.objects.filter(pk=action_pk).values_list("status", flat=True).get()


def latest_case(action: Action) -> dict | None:
    """The action's latest case (id, status, reason as stored, reason_kind and reason_label
    as the pages name it), or None."""
    # The reverse relation of reconciliation's cases: runs never imports reconciliation.
    if "cases" in getattr(action, "_prefetched_objects_cache", {}):  # plan_items: no N+1
        cases = sorted(action.cases.all(), key=lambda case: case.opened_at, reverse=True)
        latest = cases[0] if cases else None
        found = (
            None
            if latest is None
            else {
                "id": latest.id,
                "status": latest.status,
                "reason": latest.reason,
                "reason_kind": latest.reason_kind,
            }
        )
    else:
        found = (
            cases_with_reasons()
            .filter(action=action)
            .order_by("-opened_at")
            .values("id", "status", "reason", "reason_kind")
            .first()
        )
    return None if found is None else {**found, "reason_label": REASONS[found["reason_kind"]]}


def runs_newest_first(*, tenant: Tenant, phase: str | None = None) -> QuerySet[Run]:
    runs = Run.objects.filter(tenant=tenant).order_by("-created_at", "-id")
    return runs if phase is None else runs.filter(phase=phase)


def action_frozen_under(run: Run, *, action_id: str) -> Action | None:
    """The run's intent frozen under a logical id, if any (the id is unique per run)."""
    return run.actions.filter(action_id=action_id).first()


def observation_of_run(observation_id, *, run: Run) -> Observation | None:
    return Observation.objects.filter(tenant_id=run.tenant_id, run=run, pk=observation_id).first()


def latest_observation(run: Run) -> Observation | None:
    return run.observations.order_by("-created_at", "-pk").first()


def open_write(run: Run) -> Action | None:
    """The run's write still heading for a decision or an outcome, if it holds one."""
    return run.actions.filter(status__in=OPEN_ACTION_STATUSES).order_by("created_at").first()


def approval_overrides(*, tenant: Tenant) -> dict[str, bool]:
    """needs_approval per tool where the tenant set a policy (the tool's default elsewhere);
    a row that does not verify needs approval, as policy_for reads it."""
    return {
        row.tool: row.needs_approval or bool(POLICY_ROWS.problem(row))
        for row in ToolPolicy.objects.filter(tenant=tenant)
    }


def tool_catalog(*, tenant: Tenant) -> list[dict[str, Any]]:
    """Every tool at every contract version of the connectors enabled for this tenant, as
    Tool.describe() says, with needs_approval as this tenant's policy says (else the tool's
    default for it: default_needs_approval): what GET /api/v1/tools, the tools page and the
    MCP gateway's tools/list show (two queries)."""
    policies = approval_overrides(tenant=tenant)
    enabled = connectors_enabled(tenant=tenant)
    catalog = []
    for tool in all_tools():
        if tool.connector not in enabled:
            continue
        described = tool.describe()
        default = default_needs_approval(tool, reads_without_approval=enabled[tool.connector])
        described["needs_approval"] = policies.get(tool.name, default)
        catalog.append(described)
    return catalog
