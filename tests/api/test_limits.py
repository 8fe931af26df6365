"""The agent API's limits per token: request rate, concurrent long-polls, bodies and pages.

Counted in the real Redis of this test process (its own database), against real PostgreSQL;
only the clock is moved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
import requests
import time_machine
from django.conf import settings
from django.db import connection

from control.api_kit.limits import (
    KEY_PREFIX,
    LONG_POLL_GRACE_SECONDS,
    ApiLimited,
    long_poll_slot,
    process_long_polls,
)
from control.api_kit.parsing import MAX_BODY_BYTES
from control.models import ApiToken
from control.services import api_token_create
from runs.models import Run
from tests.api.conftest import API, ApiClient, assert_problem, make_token
from tests.factories import make_action, make_run, make_tenant

live = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
# 10 s into a minute: the fixed window has 50 s left.
INSIDE_A_WINDOW = datetime(2026, 3, 2, 9, 15, 10, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fresh_limits():
    """No count of an earlier test (or run: token hashes never repeat) is left in Redis."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{KEY_PREFIX}*"):
        client.delete(key)
    yield client
    client.close()


def _in_another_process(token: ApiToken, code: str, **env: str) -> None:
    """Runs `code` in a fresh Python process with this test's settings and Redis database;
    `token` there is an unsaved ApiToken with the same hash (the limits key on nothing else)."""
    script = (
        "import os, django; django.setup()\n"
        "from control.api_kit.limits import long_poll_slot, request_rate_check\n"
        "from control.models import ApiToken\n"
        f"token = ApiToken(token_hash={token.token_hash!r})\n{code}"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "REDIS_URL": settings.REDIS_URL,
        **env,
    }
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)


def _waiting(client: redis.Redis, token: ApiToken) -> int:
    return client.zcard(f"{KEY_PREFIX}long_polls:{token.token_hash}")


# --- Request rate -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_token_over_its_rate_is_refused_with_429_and_retry_after_until_the_window_ends(
    api, settings
):
    settings.COUNTERSIGN_API_RATE_PER_MINUTE = 3
    other = ApiClient(make_token(api.tenant, "other-agent"))
    with time_machine.travel(INSIDE_A_WINDOW, tick=False) as traveller:
        answers = [api.get("/runs").status for _ in range(3)]
        refused = api.get("/runs")
        # Undeclared query parameters (a 422 otherwise) count and are refused alike.
        also_refused = api.get("/runs", wiat="30")
        others = other.get("/runs")
        traveller.shift(timedelta(seconds=50))
        next_window = api.get("/runs")

    assert answers == [200, 200, 200]
    problem = assert_problem(refused, 429, "rate_limited")
    assert "3 requests" in problem["detail"]
    assert refused.headers["Retry-After"] == "50"
    assert_problem(also_refused, 429, "rate_limited")
    assert others.status == 200
    assert next_window.status == 200


@pytest.mark.django_db
def test_a_post_refused_by_the_rate_writes_nothing_and_its_idempotency_key_stays_free(
    api, settings
):
    settings.COUNTERSIGN_API_RATE_PER_MINUTE = 1
    with time_machine.travel(INSIDE_A_WINDOW, tick=False) as traveller:
        api.get("/runs")
        refused = api.post("/runs", {"goal": "close ticket-7"}, key="first-try")
        traveller.shift(timedelta(minutes=1))
        retried = api.post("/runs", {"goal": "close ticket-7"}, key="first-try")

    assert_problem(refused, 429, "rate_limited")
    assert retried.status == 201
    assert "Idempotent-Replayed" not in retried.headers
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_the_rate_is_shared_with_every_other_process_through_redis(api, settings):
    settings.COUNTERSIGN_API_RATE_PER_MINUTE = 3
    token = ApiToken.objects.get(tenant=api.tenant)
    # Not in a window's last seconds: the other process and this one must count in the same.
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)
    window = time.time() // 60
    _in_another_process(
        token, "for _ in range(3): request_rate_check(token)", COUNTERSIGN_API_RATE_PER_MINUTE="3"
    )

    answer = api.get("/runs")

    assert time.time() // 60 == window, "the minute turned during the test; run it again"
    assert_problem(answer, 429, "rate_limited")


@pytest.mark.django_db
def test_when_redis_cannot_count_the_api_refuses_with_503_and_writes_nothing(api, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"

    answer = api.post("/runs", {"goal": "close ticket-7"}, key="no-redis")

    problem = assert_problem(answer, 503, "limits_unavailable")
    assert "ConnectionError" in problem["detail"]
    assert answer.headers["Retry-After"] == "5"
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_openapi_document_lists_the_limits_problems_and_their_retry_after(client):
    document = client.get(f"{API}/openapi.json").json()

    for code in ("rate_limited", "too_many_long_polls", "limits_unavailable"):
        assert f"`{code}`" in document["info"]["description"]
    operation = document["paths"][f"{API}/actions/{{id}}"]["get"]
    for status in ("429", "503"):
        assert "Retry-After" in operation["responses"][status]["headers"]
        assert "application/problem+json" in operation["responses"][status]["content"]


# --- Concurrent long-polls --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_slot_is_released_however_the_wait_ends_and_a_dead_processs_slot_frees_itself(
    tenant, settings
):
    settings.COUNTERSIGN_API_MAX_LONG_POLLS = 1
    token, _ = api_token_create(tenant=tenant, name="agent", actor="tests")
    with pytest.raises(ZeroDivisionError), long_poll_slot(token, 30):
        1 / 0  # noqa: B018
    # Another process takes the slot for a 30 s wait and dies without leaving its block.
    _in_another_process(token, "with long_poll_slot(token, 30):\n    os._exit(0)")

    with time_machine.travel(time.time(), tick=False) as traveller:
        with pytest.raises(ApiLimited) as refused, long_poll_slot(token, 10):
            pass
        traveller.shift(timedelta(seconds=30 + LONG_POLL_GRACE_SECONDS - 2))
        with pytest.raises(ApiLimited), long_poll_slot(token, 10):
            pass
        traveller.shift(timedelta(seconds=4))
        with long_poll_slot(token, 10):
            pass

    assert refused.value.code == "too_many_long_polls"
    assert 20 <= refused.value.retry_after <= 30


def _long_poll(live_server, token: str, action, wait: float) -> requests.Response:
    return requests.get(
        f"{live_server.url}{API}/actions/{action.id}",
        params={"wait": wait},
        headers={"Authorization": f"Bearer {token}"},
        timeout=40,
    )


@live
def test_a_token_has_at_most_its_number_of_long_polls_waiting_at_once(
    live_server, settings, fresh_limits
):
    settings.COUNTERSIGN_API_MAX_LONG_POLLS = 2
    tenant = make_tenant()
    row, token = api_token_create(tenant=tenant, name="agent", actor="tests")
    other = make_token(tenant, "other-agent")
    action = make_action(make_run(tenant))
    answers: list[requests.Response] = []
    pollers = [
        threading.Thread(target=lambda: answers.append(_long_poll(live_server, token, action, 3)))
        for _ in range(2)
    ]
    for poller in pollers:
        poller.start()
    deadline = time.monotonic() + 5
    while _waiting(fresh_limits, row) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)

    third = _long_poll(live_server, token, action, 3)
    without_wait = _long_poll(live_server, token, action, 0)
    other_token = _long_poll(live_server, other, action, 0.3)
    for poller in pollers:
        poller.join()
    after = _long_poll(live_server, token, action, 0.3)

    assert third.status_code == 429
    assert third.headers["Content-Type"] == "application/problem+json"
    assert third.json()["code"] == "too_many_long_polls"
    assert 1 <= int(third.headers["Retry-After"]) <= 3
    assert (without_wait.status_code, other_token.status_code) == (200, 200)
    assert [answer.status_code for answer in answers] == [200, 200]
    assert _waiting(fresh_limits, row) == 0
    assert after.status_code == 200


def _database_sessions_but_mine() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


@live
def test_a_waiting_long_poll_holds_no_database_connection_while_it_sleeps(
    live_server, fresh_limits
):
    tenant = make_tenant()
    row, token = api_token_create(tenant=tenant, name="agent", actor="tests")
    action = make_action(make_run(tenant))
    assert _database_sessions_but_mine() == 0
    answers: list[requests.Response] = []
    poller = threading.Thread(
        target=lambda: answers.append(_long_poll(live_server, token, action, 3))
    )
    poller.start()
    deadline = time.monotonic() + 30
    while _waiting(fresh_limits, row) == 0 and poller.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _waiting(fresh_limits, row) == 1, "the long poll never began to wait"

    samples = []
    while poller.is_alive():  # sampled for as long as the poll waits
        samples.append(_database_sessions_but_mine())
        time.sleep(0.05)
    poller.join()

    # It waited its full time for a request nobody decided, and answered with it.
    assert answers[0].status_code == 200
    assert answers[0].json()["status"] == "waiting_approval"
    assert len(samples) >= 5, samples
    # A poll's query takes milliseconds of each second; holding the connection would show
    # in every sample.
    assert sum(1 for sessions in samples if sessions) <= len(samples) // 4, samples


# --- Bodies and pages -------------------------------------------------------------------------


def _body_of(size: int) -> bytes:
    body = b'{"goal": "' + b"x" * (size - len(b'{"goal": ""}')) + b'"}'
    assert len(body) == size
    return body


@pytest.mark.django_db
def test_a_body_one_byte_over_the_limit_is_a_400_too_large(api):
    problem = assert_problem(api.post("/runs", _body_of(MAX_BODY_BYTES + 1)), 400, "invalid_json")

    assert problem["rule"] == "too_large"
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_body_of_exactly_the_limit_is_parsed_and_reaches_the_goals_limit(api):
    # The goal's own limit (runs.limits) then refuses a goal that long: the body's let it through.
    problem = assert_problem(api.post("/runs", _body_of(MAX_BODY_BYTES)), 422, "invalid_arguments")

    assert problem["detail"].startswith("goal is 999988 characters; the limit is 2000")
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("limit", "status"), [(100, 200), (101, 422)])
def test_a_page_holds_at_most_100_runs(api, limit, status):
    answer = api.get("/runs", limit=limit)

    assert answer.status == status
    if status == 422:
        assert answer.body["errors"][0]["loc"] == ["query", "limit"]


@live
def test_a_process_holds_at_most_its_number_of_long_polls_whatever_their_tokens(
    live_server, settings, fresh_limits
):
    settings.COUNTERSIGN_API_MAX_LONG_POLLS_PER_PROCESS = 2
    tenant = make_tenant()
    tokens = [make_token(tenant, f"agent-{n}") for n in range(3)]
    action = make_action(make_run(tenant))
    answers: list[requests.Response] = []
    pollers = [
        threading.Thread(target=lambda t=t: answers.append(_long_poll(live_server, t, action, 3)))
        for t in tokens[:2]
    ]
    for poller in pollers:
        poller.start()
    deadline = time.monotonic() + 5
    while process_long_polls.waiting < 2 and time.monotonic() < deadline:
        time.sleep(0.05)

    third = _long_poll(live_server, tokens[2], action, 3)
    without_wait = _long_poll(live_server, tokens[2], action, 0)
    for poller in pollers:
        poller.join()
    after = _long_poll(live_server, tokens[2], action, 0.3)

    assert third.status_code == 429
    assert third.json()["code"] == "too_many_long_polls"
    assert "this server process already has 2 long-polls waiting" in third.json()["detail"]
    assert 1 <= int(third.headers["Retry-After"]) <= 3
    assert without_wait.status_code == 200
    assert [answer.status_code for answer in answers] == [200, 200]
    assert process_long_polls.waiting == 0
    assert after.status_code == 200
