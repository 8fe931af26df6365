"""What a plan's inbox card says of all its items, computed once when the plan is frozen (or
revised) and stored on its row (Plan.summary): the inbox then renders a page of plans from
their rows, never reading every item of every waiting plan again on each 10-second refresh."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from runs.tools.errors import ToolError
from runs.tools.registry import get_tool
from runs.tools.summaries import currency_of

# A plan's unusual targets and arguments checked for look-alikes on its card, at most.
UNUSUAL_SHOWN = 20


def _money_fields(tool: str, contract_version: str) -> dict[str, str]:
    try:
        return get_tool(tool, contract_version).money_fields()
    except ToolError:
        return {}


def plan_summary_of(items: Iterable[tuple[str, str, str, dict[str, Any]]]) -> dict[str, Any]:
    """From each item's (tool, contract version, target, args), in order: the tools with their
    counts, the names whose values differ between items ("target" among them), the totals of
    the arguments its tool's summary writes as money, by currency (minor units, as strings),
    the totals of the other numeric arguments whose name says amount (decimal strings: JSON
    has no decimals), and (what, text) of the first UNUSUAL_SHOWN targets and arguments that
    are not plain printable ASCII, with their number, so that the card checks every item for
    look-alikes, not only those it lists."""
    tools: Counter[str] = Counter()
    values: dict[str, set[str]] = defaultdict(set)
    totals: dict[str, Decimal] = defaultdict(Decimal)
    money: dict[str, Counter[str]] = defaultdict(Counter)
    unusual: list[tuple[str, str]] = []
    for number, (tool, contract_version, target, args) in enumerate(items, start=1):
        tools[tool] += 1
        values["target"].add(target)
        as_money = _money_fields(tool, contract_version)
        for name, value in args.items():
            values[name].add(json.dumps(value, sort_keys=True))
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if name in as_money:
                currency = currency_of(as_money[name], args)
                if isinstance(value, int) and isinstance(currency, str):
                    money[name][currency] += value
                else:  # not whole minor units of a currency: said so, never added up
                    money[name].setdefault("?", 0)
            elif "amount" in name:
                totals[name] += Decimal(str(value))
        args_json = json.dumps(args, sort_keys=True, ensure_ascii=False)
        for what, text in (
            (f"target of #{number}", target),
            (f"arguments of #{number}", args_json),
        ):
            if not (text.isascii() and text.isprintable()):
                unusual.append((what, text))
    return {
        "tools": sorted(tools.items()),
        "differing": [name for name in sorted(values) if len(values[name]) > 1],
        "totals": {name: str(total) for name, total in sorted(totals.items())},
        "unusual": unusual[:UNUSUAL_SHOWN],
        "unusual_count": len(unusual),
        # Only where a tool writes money: a summary without it reads as it always did.
        **(
            {
                "money": {
                    name: {currency: str(total) for currency, total in sorted(by.items())}
                    for name, by in sorted(money.items())
                }
            }
            if money
            else {}
        ),
    }
