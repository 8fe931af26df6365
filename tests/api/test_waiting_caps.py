"""A token holds at most COUNTERSIGN_API_MAX_WAITING_REQUESTS requests and
COUNTERSIGN_API_MAX_WAITING_PLANS plans waiting for people (runs.limits.waiting_cap_check):
one more is 429 too_many_waiting with Retry-After, nothing is written, and its
Idempotency-Key stays free for the retry once people have decided."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Action, Observation, Plan, RunEvent
from tests.api.conftest import ApiClient, assert_problem, make_token
from tests.api.support import content_hash
from tests.api.test_plans import intents
from tests.factories import make_run, make_user, reject

pytestmark = pytest.mark.django_db


def _observed_run(api: ApiClient) -> tuple[str, str]:
    run = make_run(api.tenant)
    answer = api.post(
        f"/runs/{run.id}/observations",
        {"source": "desk", "ref": "t-7", "content_hash": content_hash("x"), "summary": "seen"},
    )
    return str(run.id), answer.body["id"]


def _close(api: ApiClient, n: int, *, key: str | None = None):
    run_id, observation_id = _observed_run(api)
    body = {
        "action_id": f"close-{n}",
        "tool": "ticket.close",
        "target": f"ticket-{n}",
        "args": {"resolution": "fixed"},
        "contract_version": "v1",
        "observation_id": observation_id,
    }
    return api.post(f"/runs/{run_id}/actions", body, key=key), (run_id, body)


def test_a_token_past_its_waiting_requests_is_refused_429_and_writes_nothing(api, settings):
    settings.COUNTERSIGN_API_MAX_WAITING_REQUESTS = 2
    first, _ = _close(api, 1)
    _close(api, 2)
    actions, events = Action.objects.count(), RunEvent.objects.count()

    refused, (run_id, body) = _close(api, 3, key="close-3")

    problem = assert_problem(refused, 429, "too_many_waiting")
    assert "already has 2 requests waiting" in problem["detail"]
    assert int(refused.headers["Retry-After"]) >= 1
    assert Action.objects.count() == actions
    # Only the observation the test made before proposing.
    assert RunEvent.objects.count() == events + 2
    other = ApiClient(make_token(api.tenant, "other-agent"), api.tenant)
    assert _close(other, 4)[0].status == 201

    reject(Action.objects.get(pk=first.body["id"]), make_user(api.tenant), reason="no")
    retried = api.post(f"/runs/{run_id}/actions", body, key="close-3")
    assert retried.status == 201, retried.body


def test_a_token_past_its_waiting_plans_is_refused_429_and_writes_nothing(api, settings):
    settings.COUNTERSIGN_API_MAX_WAITING_PLANS = 1
    run_id, observation_id = _observed_run(api)
    assert (
        api.post(
            f"/runs/{run_id}/plans", {"intents": intents(2), "observation_id": observation_id}
        ).status
        == 201
    )
    run_id, observation_id = _observed_run(api)
    observations = Observation.objects.count()

    refused = api.post(
        f"/runs/{run_id}/plans", {"intents": intents(2), "observation_id": observation_id}
    )

    problem = assert_problem(refused, 429, "too_many_waiting")
    assert "already has 1 plans waiting" in problem["detail"]
    assert "Retry-After" in refused.headers
    assert Plan.objects.count() == 1
    assert Action.objects.filter(run_id=run_id).count() == 0
    assert Observation.objects.count() == observations


def test_the_waiting_count_reads_the_partial_index_of_waiting_rows_only(api, settings):
    settings.COUNTERSIGN_API_MAX_WAITING_REQUESTS = 5
    _close(api, 1)
    with CaptureQueriesContext(connection) as queries:
        _close(api, 2)

    counts = [q["sql"] for q in queries if '"runs_action"."proposed_by" =' in q["sql"]]
    assert len(counts) == 1
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("EXPLAIN " + counts[0].replace("%s", "'x'"))
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # A partial index of waiting rows (which one depends on the table's statistics): never
    # the tenant's decided history.
    assert "action_waiting_proposer" in plan or "action_approval_queue" in plan, plan


def test_an_agent_at_its_cap_still_proposes_what_needs_no_approval(api, settings):
    settings.COUNTERSIGN_API_MAX_WAITING_REQUESTS = 1
    _close(api, 1)
    run_id, observation_id = _observed_run(api)

    lookup = api.post(
        f"/runs/{run_id}/actions",
        {
            "action_id": "look-up",
            "tool": "ticket.lookup",
            "target": "ticket-9",
            "args": {},
            "contract_version": "v1",
            "observation_id": observation_id,
        },
    )

    assert lookup.status == 201, lookup.body
    assert lookup.body["status"] == "approved"
