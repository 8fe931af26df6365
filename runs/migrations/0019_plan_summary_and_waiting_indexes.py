"""Plans keep the summary their inbox card shows (computed once when frozen, instead of from
every item on every render), and two partial indexes of waiting plans: the inbox's page of
them, and a token's count (runs.limits.waiting_cap_check). Plans still waiting get their
summary here; decided ones keep an empty one (only a decision link's page shows them, and
it reads the same fields with empty defaults)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from decimal import Decimal

from django.db import migrations, models


def _summary_of(items) -> dict:
    # A copy of runs.services.plan_summaries.plan_summary_of as it was at this migration.
    tools = Counter()
    values = defaultdict(set)
    totals = defaultdict(Decimal)
    unusual = []
    for number, (tool, target, args) in enumerate(items, start=1):
        tools[tool] += 1
        values["target"].add(target)
        for name, value in args.items():
            values[name].add(json.dumps(value, sort_keys=True))
            if "amount" in name and isinstance(value, int | float) and not isinstance(value, bool):
                totals[name] += Decimal(str(value))
        args_json = json.dumps(args, sort_keys=True, ensure_ascii=False)
        shown = ((f"target of #{number}", target), (f"arguments of #{number}", args_json))
        for what, text in shown:
            if not (text.isascii() and text.isprintable()):
                unusual.append((what, text))
    return {
        "tools": sorted(tools.items()),
        "differing": [name for name in sorted(values) if len(values[name]) > 1],
        "totals": {name: str(total) for name, total in sorted(totals.items())},
        "unusual": unusual[:20],
        "unusual_count": len(unusual),
    }


def summarize_waiting_plans(apps, schema_editor) -> None:
    Plan = apps.get_model("runs", "Plan")
    Action = apps.get_model("runs", "Action")
    for plan in Plan.objects.filter(status="waiting_approval").iterator():
        items = (
            Action.objects.filter(plan=plan).order_by("position").values_list("tool", "target", "args")
        )
        plan.summary = _summary_of(items.iterator())
        plan.save(update_fields=["summary"])


class Migration(migrations.Migration):
    dependencies = [
        ("control", "0005_metric_rollup"),
        ("runs", "0018_action_tenant_digest"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="summary",
            field=models.JSONField(default=dict),
        ),
        migrations.RunPython(summarize_waiting_plans, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="plan",
            index=models.Index(
                condition=models.Q(("status", "waiting_approval")),
                fields=["tenant", "expires_at", "id"],
                name="plan_waiting_queue",
            ),
        ),
        migrations.AddIndex(
            model_name="plan",
            index=models.Index(
                condition=models.Q(("status", "waiting_approval")),
                fields=["tenant", "proposed_by"],
                name="plan_waiting_proposer",
            ),
        ),
    ]
