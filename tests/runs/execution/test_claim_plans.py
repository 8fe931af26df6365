"""The ready claim's plan does not hang on the statistics (docs/PERFORMANCE.md, "Statistics
and plans"): the check for an earlier open item of a plan stays a subplan that single intents
never run, whatever the planner believes about the queue's size."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from runs.execution.worker import claiming, ready_to_claim

# EXPLAIN, ANALYZE and pg_class: the PostgreSQL planner's own.
pytestmark = [pytest.mark.django_db, pytest.mark.postgresql]


def _plan_of_the_ready_claim() -> str:
    with transaction.atomic():
        sql, params = claiming(ready_to_claim(), 20).query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql, params)
            return "\n".join(row[0] for row in cursor.fetchall())


def test_the_ready_claim_never_joins_every_open_intent_against_each_candidate():
    # Statistics of an empty queue, as after a quiet night.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_action")

    plan = _plan_of_the_ready_claim()

    assert "Anti Join" not in plan, plan
    assert "SubPlan" in plan, plan


def test_autovacuum_analyzes_the_action_table_after_a_fixed_number_of_changes():
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'runs_action'")
        (options,) = cursor.fetchone()

    assert set(options) == {
        "autovacuum_analyze_scale_factor=0",
        "autovacuum_analyze_threshold=5000",
    }
