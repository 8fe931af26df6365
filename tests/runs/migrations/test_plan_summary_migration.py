"""Migration 0019 stores on each waiting plan the summary its inbox card shows, computed from
its items as the page used to on every render; rolled back, the field goes away."""

from __future__ import annotations

import pytest

from runs.models import Plan
from tests.factories import make_tenant
from tests.migrating import migrate_to
from tests.pages.test_plan_inbox import refunds_plan

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("runs", "0018_action_tenant_digest")]
AFTER = [("runs", "0019_plan_summary_and_waiting_indexes")]


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

    migrate_to(BEFORE)
    migrate_to(AFTER)

    assert Plan.objects.get(pk=plan.pk).summary == stored
