"""/metrics: protected, cheap (a fixed handful of queries at any size), derived from rows."""

from __future__ import annotations

import re

import django_rq
import pytest
from django.db import connection
from django.test import RequestFactory

from control.foundation.counters import REDIS_COUNTERS, count_event
from control.metrics import metrics_view
from runs.execution.worker import settle_unknown
from runs.services import lease_claim, protocol
from runs.tools.retry import DEFAULT_POLICY
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db
TOKEN = "a-long-random-metrics-token"
SCRAPE_QUERIES = 6


@pytest.fixture
def metrics_token(settings):
    settings.COUNTERSIGN_METRICS_TOKEN = TOKEN
    settings.COUNTERSIGN_METRICS_NETWORKS = []
    return TOKEN


@pytest.fixture
def worker_counters(settings):
    redis = django_rq.get_connection(settings.RQ_EXECUTION_QUEUE)
    redis.delete(REDIS_COUNTERS)
    yield redis
    redis.delete(REDIS_COUNTERS)


def scrape(token: str | None = TOKEN, address: str = "203.0.113.9"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    request = RequestFactory().get("/metrics", REMOTE_ADDR=address, **headers)
    return metrics_view(request)


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample line, its labels given in any order."""
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if found == labels:
            return float(match.group(3))
    raise AssertionError(f"no sample {name}{labels} in:\n{text}")


def test_metrics_do_not_exist_until_a_token_or_a_network_is_configured(settings):
    settings.COUNTERSIGN_METRICS_TOKEN = ""
    settings.COUNTERSIGN_METRICS_NETWORKS = []

    assert scrape().status_code == 404


def test_a_scrape_without_the_right_token_is_refused(metrics_token):
    assert scrape(token=None).status_code == 403
    assert scrape(token="not-the-token").status_code == 403
    answered = scrape()
    assert answered.status_code == 200
    assert answered["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"


def test_an_allowed_network_scrapes_without_a_token_and_others_do_not(settings):
    settings.COUNTERSIGN_METRICS_TOKEN = ""
    settings.COUNTERSIGN_METRICS_NETWORKS = ["10.1.0.0/16"]

    assert scrape(token=None, address="10.1.2.3").status_code == 200
    assert scrape(token=None, address="10.2.0.1").status_code == 403


def test_a_scrape_costs_the_same_handful_of_queries_with_many_rows_as_with_few(
    metrics_token, django_assert_num_queries
):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    approve(make_action(make_run(tenant)), operator)
    with django_assert_num_queries(SCRAPE_QUERIES):
        assert scrape().status_code == 200

    for number in range(30):
        action = make_action(make_run(tenant), target=f"ticket-{number + 1}")
        if number % 2:
            approve(action, operator)
    with django_assert_num_queries(SCRAPE_QUERIES):
        assert scrape().status_code == 200


def test_pending_approvals_and_the_approval_latency_histogram_come_from_the_rows(metrics_token):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    for number in range(3):
        make_action(make_run(tenant), target=f"ticket-{number + 1}")
    approve(make_action(make_run(tenant), target="ticket-9"), operator)

    text = scrape().content.decode()

    assert sample(text, "countersign_pending_approvals", tool="ticket.close") == 3
    assert sample(text, "countersign_approval_latency_seconds_count") == 1
    assert sample(text, "countersign_approval_latency_seconds_bucket", le="10") == 1
    assert sample(text, "countersign_approval_latency_seconds_bucket", le="+Inf") == 1
    assert sample(text, "countersign_actions", tool="ticket.close", status="approved") == 1
    assert sample(text, "countersign_outbox_undelivered") >= 0
    assert "# TYPE countersign_approval_latency_seconds histogram" in text


def test_a_takeover_of_a_dead_workers_write_counts_as_a_lease_steal_and_an_uncertain_backlog(
    metrics_token, blind_tool
):
    tenant = make_tenant()
    action = make_action(make_run(tenant), tool="blind.noop", target="item-1", args={"n": 1})
    approve(action, make_user(tenant, "operator"))
    dead = lease_claim(run_id=action.run_id, owner="worker-a")
    protocol.attempt_begin(action_pk=action.pk, lease=dead, worker="worker-a")
    # worker-a dies mid-call; its lease runs out on the database clock.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_lease SET expires_at = now() - interval '1 second' WHERE run_id = %s",
            [action.run_id],
        )
    before = scrape().content.decode()
    assert sample(before, "countersign_lease_steals_total") == 0

    taker = lease_claim(run_id=action.run_id, owner="worker-b")
    after_claim = scrape().content.decode()
    action.refresh_from_db()
    settle_unknown(action=action, lease=taker, worker="worker-b", policy=DEFAULT_POLICY)
    settled = scrape().content.decode()

    assert sample(after_claim, "countersign_lease_steals_total") == 1
    assert sample(settled, "countersign_lease_steals_total") == 1
    assert sample(settled, "countersign_uncertain_actions", tool="blind.noop") == 1
    assert sample(settled, "countersign_uncertain_oldest_age_seconds") >= 0
    assert (
        sample(
            settled,
            "countersign_attempts_total",
            status="uncertain",
            error_class="crash_after_send",
        )
        == 1
    )


def test_worker_events_counted_in_redis_appear_in_the_scrape(metrics_token, worker_counters):
    count_event("fencing_rejections")
    count_event("fencing_rejections")
    count_event("duplicate_jobs", 5)

    text = scrape().content.decode()

    assert sample(text, "countersign_fencing_rejections_total") == 2
    assert sample(text, "countersign_duplicate_suppressions_total", how="duplicate_job") == 5
    assert sample(text, "countersign_redis_up") == 1
    with pytest.raises(ValueError, match="unknown worker event"):
        count_event("made_up")
