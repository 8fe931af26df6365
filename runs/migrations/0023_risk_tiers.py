"""Risk tiers: a tool policy may rate its tool low, high or irreversible, and each intent
keeps the tier it was proposed under. Intents from before are rated high (the middle tier:
neither waved through as low nor shouted as irreversible); a policy row from before has no
rating, so its tool's nature decides (runs.selectors.core.risk_of), and it still verifies
(the signature covers the rating only once one is set).

The intent's column is added with ADD COLUMN on both databases. Django's AddField would
rebuild runs_action on SQLite for a NOT NULL column, and the rebuild drops the table's own
triggers (the metrics counts) and breaks those that name it (runs_approval's latency).
"""

from __future__ import annotations

from django.db import migrations, models

RISKS = [(1, "low"), (2, "high"), (3, "irreversible")]
ADD = "ALTER TABLE runs_action ADD COLUMN risk smallint NOT NULL DEFAULT 2 CHECK (risk >= 0)"
DROP = "ALTER TABLE runs_action DROP COLUMN risk"


class Migration(migrations.Migration):
    dependencies = [("runs", "0022_connector_enablements")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(ADD, DROP)],
            state_operations=[
                migrations.AddField(
                    model_name="action",
                    name="risk",
                    field=models.PositiveSmallIntegerField(choices=RISKS, default=2),
                )
            ],
        ),
        migrations.AddField(
            model_name="toolpolicy",
            name="risk",
            field=models.PositiveSmallIntegerField(blank=True, choices=RISKS, null=True),
        ),
    ]
