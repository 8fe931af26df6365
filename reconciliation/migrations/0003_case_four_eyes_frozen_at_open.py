"""A case keeps the four-eyes rule it opened under (ReconciliationCase.four_eyes_at_open).

Cases already open take the rule their tool's policy holds now (the nearest to "when they
opened" that is still known), or four eyes when a first reconciler already proposed a
resolution (it was proposed under four eyes). Resolved cases keep the default: nothing
decides them again.
"""

from __future__ import annotations

from django.db import migrations, models

UNRESOLVED = ("probing", "open", "awaiting_second")


def freeze_open_cases(apps, schema_editor) -> None:
    case_model = apps.get_model("reconciliation", "ReconciliationCase")
    policy_model = apps.get_model("runs", "ToolPolicy")
    strict = set(
        policy_model.objects.filter(four_eyes=True).values_list("tenant_id", "tool")
    )
    cases = case_model.objects.filter(status__in=UNRESOLVED).values_list(
        "pk", "tenant_id", "action__tool", "status"
    )
    frozen = [
        pk
        for pk, tenant_id, tool, status in cases
        if status == "awaiting_second" or (tenant_id, tool) in strict
    ]
    case_model.objects.filter(pk__in=frozen).update(four_eyes_at_open=True)


class Migration(migrations.Migration):
    dependencies = [
        ("reconciliation", "0002_metric_rollup"),
        ("runs", "0016_action_analyze_threshold"),
    ]

    operations = [
        migrations.AddField(
            model_name="reconciliationcase",
            name="four_eyes_at_open",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(freeze_open_cases, migrations.RunPython.noop),
    ]
