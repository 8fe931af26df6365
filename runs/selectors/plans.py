"""What the inbox shows of the plans waiting for a decision, a page at a time, in a fixed
number of queries whatever their size: a page of plans (their summaries are on their rows,
computed once when each was frozen: runs.services.plan_summaries) and their first items."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import OuterRef, Prefetch, Q, Subquery

from control.models import Tenant
from runs.models import Action, Plan, Risk
from runs.selectors.pages import INBOX_PAGE_SIZE
from runs.tools.errors import ToolError
from runs.tools.registry import get_tool
from runs.tools.summaries import money

ITEMS_SHOWN = 50


def _money_total(total: str, currency: str) -> str:
    if currency == "?":
        return "and amounts that are not whole minor units of a currency (not added)"
    return money(int(total), currency)


def _last_unsummed(by_currency: dict[str, str]) -> list[str]:
    """The currencies in order, the amounts that could not be added ("?") said last."""
    return sorted(by_currency, key=lambda currency: (currency == "?", currency))


def intent_summary(action: Action) -> str:
    """The intent's sentence in its tool's words; "" when the tool declares none or is gone."""
    try:
        tool = get_tool(action.tool, action.contract_version)
    except ToolError:
        return ""
    return tool.summarize(target=action.target, args=action.args)


@dataclass
class PlanSummary:
    plan: Plan

    @property
    def tools(self) -> list[tuple[str, int]]:
        return [(tool, count) for tool, count in self.plan.summary.get("tools", [])]

    @property
    def differing(self) -> list[str]:
        """The arguments whose values are not the same for every item (and "target" if so)."""
        return self.plan.summary.get("differing", [])

    @property
    def totals(self) -> dict[str, Decimal]:
        """name -> sum over the items, for numeric arguments whose name says amount."""
        return {name: Decimal(total) for name, total in self.plan.summary.get("totals", {}).items()}

    @property
    def money_totals(self) -> list[tuple[str, str]]:
        """The arguments written as money, each with its totals by currency: "1,500.00 EUR ·
        12 JPY" (never one sum across currencies)."""
        return [
            (
                name,
                " · ".join(_money_total(by[currency], currency) for currency in _last_unsummed(by)),
            )
            for name, by in self.plan.summary.get("money", {}).items()
        ]

    @property
    def unusual(self) -> list[tuple[str, str]]:
        """Of every item, not only those shown: (what, text) for each target or arguments
        that is not plain printable ASCII, the first UNUSUAL_SHOWN, for the look-alike check."""
        return [(what, text) for what, text in self.plan.summary.get("unusual", [])]

    @property
    def unusual_count(self) -> int:
        return self.plan.summary.get("unusual_count", 0)

    @property
    def rows(self) -> list[tuple[int, str, str, str, str]]:
        """The first items as shown: number, tool, target, arguments as canonical JSON, and
        the tool's sentence for it."""
        return [
            (
                item.position + 1,
                item.tool,
                item.target,
                json.dumps(item.args, sort_keys=True),
                intent_summary(item),
            )
            for item in self.plan.shown_items
        ]

    @property
    def risk(self) -> str:
        """The highest risk tier among all its items (one decision covers them all)."""
        highest = getattr(self.plan, "highest_risk", None)
        return Risk(highest).label if highest else Risk(Risk.HIGH).label

    @property
    def hidden_count(self) -> int:
        return self.plan.size - len(self.plan.shown_items)


@dataclass(frozen=True)
class PlansPage:
    summaries: list[PlanSummary]
    next_cursor: str = ""


def inbox_plans(*, tenant: Tenant, after: str = "") -> PlansPage:
    """The tenant's plans waiting for a decision, soonest to expire first, INBOX_PAGE_SIZE a
    page (keyset on expires_at and id, the plan_waiting_queue index)."""
    waiting = Plan.objects.filter(tenant=tenant, status=Plan.Status.WAITING_APPROVAL)
    if after:
        waiting = _after(waiting, after)
    found = _summaries(waiting.order_by("expires_at", "pk")[: INBOX_PAGE_SIZE + 1])
    more = len(found) > INBOX_PAGE_SIZE
    found = found[:INBOX_PAGE_SIZE]
    last = found[-1].plan if more else None
    return PlansPage(found, f"{last.expires_at.isoformat()}~{last.pk}" if last else "")


def inbox_plans_waiting_count(*, tenant: Tenant) -> int:
    """How many of the tenant's plans wait for a decision (the inbox counts them apart from
    single requests: a plan is one decision, whatever its size)."""
    return Plan.objects.filter(tenant=tenant, status=Plan.Status.WAITING_APPROVAL).count()


def _after(plans, cursor: str):
    try:
        moment, pk = cursor.split("~", 1)
        expires_at, pk = datetime.fromisoformat(moment), uuid.UUID(pk)
    except ValueError:
        return plans
    return plans.filter(Q(expires_at__gt=expires_at) | Q(expires_at=expires_at, pk__gt=pk))


def plan_summary(plan_pk) -> PlanSummary | None:
    """One plan as the inbox would show it, whatever its status (a decision link's page)."""
    found = _summaries(Plan.objects.filter(pk=plan_pk))
    return found[0] if found else None


def _summaries(plans_query) -> list[PlanSummary]:
    """Two queries: the plans (with run and observation), and their first items."""
    shown = Action.objects.order_by("position")[:ITEMS_SHOWN]
    riskiest = Action.objects.filter(plan=OuterRef("pk")).order_by("-risk").values("risk")[:1]
    plans = (
        plans_query.select_related("run", "observation")
        .annotate(highest_risk=Subquery(riskiest))
        .prefetch_related(Prefetch("items", queryset=shown, to_attr="shown_items"))
    )
    return [PlanSummary(plan) for plan in plans]


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
