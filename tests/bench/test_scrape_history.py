"""bench.scrape_history: the long history scrape_cost measures /metrics over, and its status-change
measure, which leaves the rollup equal to a fresh count with triggers on or off."""

from __future__ import annotations

import pytest

from bench.scrape_history import scrape_milliseconds, seed_history, transition_microseconds
from runs.models import Action, Approval, Attempt, Receipt
from tests.control.test_rollup import fresh_counts, rollup_counts

pytestmark = pytest.mark.django_db


def test_a_seeded_history_holds_settled_intents_with_their_rows_and_is_counted():
    report = seed_history(tenant_name="history", actions=40)

    settled = Action.objects.filter(tenant=report.tenant).exclude(action_id="close")
    by_status = {
        status: settled.filter(status=status).count()
        for status in ("succeeded", "failed", "rejected", "expired")
    }
    assert by_status == {"succeeded": 34, "failed": 2, "rejected": 2, "expired": 2}
    assert Approval.objects.filter(action__in=settled).count() == 38
    assert Attempt.objects.filter(action__in=settled).count() == 36
    assert Receipt.objects.filter(action__in=settled).count() == 34
    assert rollup_counts() == fresh_counts()
    assert len(scrape_milliseconds(2)) == 2


@pytest.mark.parametrize("triggers", [True, False])
def test_the_status_change_measure_nets_to_zero_with_or_without_triggers(triggers):
    report = seed_history(tenant_name="history", actions=20)
    before = fresh_counts()

    assert transition_microseconds(tenant=report.tenant, count=5, triggers=triggers) > 0

    assert fresh_counts() == before == rollup_counts()
