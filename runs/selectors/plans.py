"""What the inbox shows of the plans waiting for a decision, in a fixed number of queries
whatever their size: the plans, their first items, and one pass over every item's tool,
target and arguments for the summary (tools, what differs, the totals of amounts)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Prefetch, Q

from control.models import Tenant
from runs.models import Action, Plan

ITEMS_SHOWN = 50
# A plan's unusual targets and arguments checked for look-alikes on its card, at most.
UNUSUAL_SHOWN = 20


@dataclass
class PlanSummary:
    plan: Plan
    tools: list[tuple[str, int]] = field(default_factory=list)
    # The arguments whose values are not the same for every item (and "target" if so).
    differing: list[str] = field(default_factory=list)
    # name -> sum over the items, for numeric arguments whose name says amount.
    totals: dict[str, Decimal] = field(default_factory=dict)
    # Of every item, not only those shown: (what, text) for each target or arguments that is
    # not plain printable ASCII, the first UNUSUAL_SHOWN of them, for the look-alike check.
    unusual: list[tuple[str, str]] = field(default_factory=list)
    unusual_count: int = 0

    @property
    def rows(self) -> list[tuple[int, str, str, str]]:
        """The first items as shown: number, tool, target, arguments as canonical JSON."""
        return [
            (item.position + 1, item.tool, item.target, json.dumps(item.args, sort_keys=True))
            for item in self.plan.shown_items
        ]

    @property
    def hidden_count(self) -> int:
        return self.plan.size - len(self.plan.shown_items)


def inbox_plans(*, tenant: Tenant) -> list[PlanSummary]:
    """The tenant's plans waiting for a decision, soonest to expire first."""
    waiting = Plan.objects.filter(tenant=tenant, status=Plan.Status.WAITING_APPROVAL)
    return _summaries(waiting.order_by("expires_at", "pk"))


def plan_summary(plan_pk) -> PlanSummary | None:
    """One plan as the inbox would show it, whatever its status (a decision link's page)."""
    found = _summaries(Plan.objects.filter(pk=plan_pk))
    return found[0] if found else None


def _summaries(plans_query) -> list[PlanSummary]:
    """Three queries: the plans, their first items, and one pass over every item."""
    shown = Action.objects.order_by("position")[:ITEMS_SHOWN]
    plans = list(
        plans_query.select_related("run", "observation").prefetch_related(
            Prefetch("items", queryset=shown, to_attr="shown_items")
        )
    )
    if not plans:
        return []
    rows = Action.objects.filter(plan__in=plans).values_list(
        "plan_id", "position", "tool", "target", "args"
    )
    per_plan: dict[Any, list[tuple[int, str, str, dict]]] = defaultdict(list)
    for plan_id, position, tool, target, args in rows.order_by("position"):
        per_plan[plan_id].append((position, tool, target, args))
    return [_summary(plan, per_plan[plan.pk]) for plan in plans]


def _summary(plan: Plan, items: list[tuple[int, str, str, dict]]) -> PlanSummary:
    tools = Counter(tool for _, tool, _, _ in items)
    values: dict[str, set[str]] = defaultdict(set)
    totals: dict[str, Decimal] = defaultdict(Decimal)
    unusual: list[tuple[str, str]] = []
    for position, _, target, args in items:
        values["target"].add(target)
        for name, value in args.items():
            values[name].add(json.dumps(value, sort_keys=True))
            if "amount" in name and isinstance(value, int | float) and not isinstance(value, bool):
                totals[name] += Decimal(str(value))
        number = position + 1
        args_json = json.dumps(args, sort_keys=True, ensure_ascii=False)
        for what, text in (
            (f"target of #{number}", target),
            (f"arguments of #{number}", args_json),
        ):
            if not (text.isascii() and text.isprintable()):
                unusual.append((what, text))
    differing = [name for name in sorted(values) if len(values[name]) > 1]
    return PlanSummary(
        plan=plan,
        tools=sorted(tools.items()),
        differing=differing,
        totals=dict(totals),
        unusual=unusual[:UNUSUAL_SHOWN],
        unusual_count=len(unusual),
    )


def plan_of_tenant(plan_pk, *, tenant: Tenant) -> Plan | None:
    return Plan.objects.filter(pk=plan_pk, tenant=tenant).select_related("run").first()


def plan_items_page(plan: Plan, *, search: str = "", after: int = -1) -> tuple[list[Action], int]:
    """One page of a plan's intents in order after position `after`, those whose target or
    arguments contain `search`; and the position the next page starts after (-1: none)."""
    items = plan.items.filter(position__gt=after)
    if search:
        items = items.filter(Q(target__icontains=search) | Q(args__icontains=search))
    found = list(items.order_by("position")[: ITEMS_SHOWN + 1])
    more = len(found) > ITEMS_SHOWN
    found = found[:ITEMS_SHOWN]
    return found, found[-1].position if more else -1
