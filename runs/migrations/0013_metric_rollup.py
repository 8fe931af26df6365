"""What the runs tables count for on `/metrics`, kept by triggers (control.foundation.rollup).

Intents by tool and status, attempts by status and error class, receipts by source, and
each decision's latency (its time minus its intent's proposal) as a histogram bucket and a
sum in microseconds. The buckets are runs.metrics.APPROVAL_BUCKETS as this was written;
changing them takes a new migration that replaces the approvals' triggers.
"""

from __future__ import annotations

from django.db import migrations

from control.migrations._rollup_triggers import Counted, Fact

BUCKETS = (10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)


def _bucket(latency: str) -> str:
    whens = " ".join(f"WHEN {latency} <= {bound * 1_000_000} THEN '{bound}'" for bound in BUCKETS)
    return f"CASE {whens} ELSE '+Inf' END"


# A function, so PostgreSQL computes a latency once, not once per bucket it compares.
LATENCY_BUCKET = (
    "CREATE FUNCTION countersign_latency_bucket(microseconds bigint) RETURNS text "
    f"LANGUAGE sql IMMUTABLE AS $$ SELECT {_bucket('microseconds')} $$"
)


def _sqlite_microseconds(moment: str) -> str:
    # Django stores SQLite datetimes in UTC as 'YYYY-MM-DD HH:MM:SS[.ffffff]'.
    return (
        f"(CAST(strftime('%s', {moment}) AS INTEGER) * 1000000 "
        f"+ CAST(substr({moment} || '.000000', 21, 6) AS INTEGER))"
    )


def _approval_facts(row: str, vendor: str) -> list[Fact]:
    proposed = f"(SELECT a.created_at FROM runs_action AS a WHERE a.id = {row}.action_id)"
    if vendor == "postgresql":
        latency = f"(extract(epoch FROM {row}.created_at - {proposed}) * 1000000)::bigint"
        bucket = f"countersign_latency_bucket({latency})"
    else:
        latency = (
            f"({_sqlite_microseconds(f'{row}.created_at')} - {_sqlite_microseconds(proposed)})"
        )
        bucket = _bucket(latency)
    return [
        ("'approval_latency_bucket'", bucket, "''", "1"),
        ("'approval_latency_sum'", "''", "''", latency),
    ]


def _install_bucket(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LATENCY_BUCKET, params=None)


def _remove_bucket(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION countersign_latency_bucket(bigint)")


COUNTED = (
    Counted.rows_by("runs_action", "actions", "tool", "status"),
    Counted.rows_by("runs_attempt", "attempts", "status", "error_class"),
    Counted.rows_by("runs_receipt", "receipts", "source"),
    Counted(
        table="runs_approval",
        metrics=("approval_latency_bucket", "approval_latency_sum"),
        columns=("action_id", "created_at"),
        facts=_approval_facts,
    ),
)


class Migration(migrations.Migration):
    dependencies = [("runs", "0012_plan_versions"), ("control", "0005_metric_rollup")]

    operations = [
        migrations.RunPython(_install_bucket, _remove_bucket),
        *(counted.operation() for counted in COUNTED),
    ]
