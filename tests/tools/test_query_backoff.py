"""A query by key that keeps failing never spins: it backs off, capped, and after a bounded
number of tries the action reaches a person with every failed query as its finding."""

from __future__ import annotations

import pytest
from django.db import connection

from runs.execution.worker import settle_unknown
from runs.models import Action
from runs.selectors import orphaned_actions
from runs.services import lease_claim, protocol, recovery
from runs.tools.retry import DEFAULT_POLICY
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db
WORKER = "query-worker"


def in_flight_close() -> Action:
    """A ticket.close sent by a worker that then died: in flight, its lease run out."""
    tenant = make_tenant()
    action = make_action(make_run(tenant), target="ticket-31")
    approve(action, make_user(tenant, "operator"))
    lease = lease_claim(run_id=action.run_id, owner="dead-worker")
    protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="dead-worker")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_lease SET expires_at = now() - interval '1 second' WHERE run_id = %s",
            [action.run_id],
        )
    action.refresh_from_db()
    return action


@pytest.mark.parametrize(
    ("status", "body"),
    [(503, {"detail": "down"}), (403, {"detail": "no"}), (200, b"<html>not json</html>")],
)
def test_failing_queries_back_off_then_reach_a_person_with_every_finding(external, status, body):
    external.answer(status, body)
    action = in_flight_close()
    pauses = []
    for _ in range(recovery.QUERY_ATTEMPTS):
        lease = lease_claim(run_id=action.run_id, owner=WORKER)
        settle_unknown(action=action, lease=lease, worker=WORKER, policy=DEFAULT_POLICY)
        action.refresh_from_db()
        if action.status == "in_flight":
            assert not orphaned_actions().filter(pk=action.pk).exists()
            with connection.cursor() as cursor:
                # clock_timestamp(): now() is when the test's transaction began.
                cursor.execute(
                    "SELECT extract(epoch FROM next_attempt_at - clock_timestamp()) "
                    "FROM runs_action "
                    "WHERE id = %s",
                    [action.pk],
                )
                pauses.append(round(cursor.fetchone()[0]))

    assert pauses == [2, 4, 8, 16, 32]
    assert (action.status, action.error_class) == ("uncertain", "crash_after_send")
    assert f"{recovery.QUERY_ATTEMPTS} queries by key proved nothing" in action.last_error
    assert action.last_error.count(" | ") == recovery.QUERY_ATTEMPTS - 1
    assert action.run.events.filter(type="query.failed", action=action).count() == 6
    assert len(external.requests) == recovery.QUERY_ATTEMPTS  # one query each, no resend
    assert all(method == "GET" for method, *_ in external.requests)
