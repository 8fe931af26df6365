"""Cases by status and resolution for `/metrics`, kept by triggers (control.foundation.rollup)."""

from __future__ import annotations

from django.db import migrations

from control.migrations._rollup_triggers import Counted


class Migration(migrations.Migration):
    dependencies = [("reconciliation", "0001_initial"), ("control", "0005_metric_rollup")]

    operations = [
        Counted.rows_by(
            "reconciliation_reconciliationcase", "reconciliation_cases", "status", "resolution"
        ).operation()
    ]
