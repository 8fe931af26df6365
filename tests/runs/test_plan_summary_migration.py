"""Migration 0019 stores on each waiting plan the summary its inbox card shows, computed from
its items as the page used to on every render; rolled back, the field goes away."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from runs.models import Plan
from tests.factories import make_tenant
from tests.pages.test_plan_inbox import refunds_plan

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("runs", "0018_action_tenant_digest")]
AFTER = [("runs", "0019_plan_summary_and_waiting_indexes")]


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.fixture
def latest_schema_after():
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.usefixtures("latest_schema_after")
def test_waiting_plans_get_the_summary_their_card_shows():
    plan = refunds_plan(make_tenant(), 3)
    stored = Plan.objects.get(pk=plan.pk).summary
    assert stored == {
        "tools": [["payment.refund", 3]],
        "differing": ["amount_cents", "target"],
        "totals": {"amount_cents": "303"},
        "unusual": [],
        "unusual_count": 0,
    }

    _migrate(BEFORE)
    _migrate(AFTER)

    assert Plan.objects.get(pk=plan.pk).summary == stored
