"""What a plan's inbox card says of all its items, computed once when the plan is frozen (or
revised) and stored on its row (Plan.summary): the inbox then renders a page of plans from
their rows, never reading every item of every waiting plan again on each 10-second refresh."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

# A plan's unusual targets and arguments checked for look-alikes on its card, at most.
UNUSUAL_SHOWN = 20


def plan_summary_of(items: Iterable[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """From each item's (tool, target, args), in order: the tools with their counts, the names
    whose values differ between items ("target" among them), the totals of numeric arguments
    whose name says amount (as decimal strings: JSON has no decimals), and (what, text) of the
    first UNUSUAL_SHOWN targets and arguments that are not plain printable ASCII, with their
    number, so that the card checks every item for look-alikes, not only those it lists."""
    tools: Counter[str] = Counter()
    values: dict[str, set[str]] = defaultdict(set)
    totals: dict[str, Decimal] = defaultdict(Decimal)
    unusual: list[tuple[str, str]] = []
    for number, (tool, target, args) in enumerate(items, start=1):
        tools[tool] += 1
        values["target"].add(target)
        for name, value in args.items():
            values[name].add(json.dumps(value, sort_keys=True))
            if "amount" in name and isinstance(value, int | float) and not isinstance(value, bool):
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
    }
