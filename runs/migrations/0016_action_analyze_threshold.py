"""Autovacuum analyzes the action table after a fixed number of changes, not 10% of it.

A burst of approvals turns many actions ready at once, and the workers' claims are planned
from this table's statistics; with the default scale factor a table with a long history is
re-analyzed only after 10% of its rows changed (docs/PERFORMANCE.md, "Statistics and plans").
A storage parameter of PostgreSQL's: other databases keep their own ways.
"""

from django.db import migrations

SETTINGS = "autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000"


def analyze_often(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE runs_action SET ({SETTINGS})")


def analyze_by_default(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "ALTER TABLE runs_action RESET (autovacuum_analyze_scale_factor, "
            "autovacuum_analyze_threshold)"
        )


class Migration(migrations.Migration):
    dependencies = [("runs", "0015_open_intents_and_checkpoint_indexes")]

    operations = [migrations.RunPython(analyze_often, analyze_by_default)]
