"""GET /actions/{id}?wait=SECONDS: a long-poll that answers as soon as a decision lands."""

from __future__ import annotations

import threading
import time

import pytest
import requests
from django.db import connection

from runs.services import approval_decide, endings
from tests.api.conftest import assert_problem, make_token
from tests.api.support import make_uncertain_with_case
from tests.factories import approve, make_action, make_run, make_tenant, make_user, reject

live = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def _get(live_server, token: str, action, **params) -> requests.Response:
    return requests.get(
        f"{live_server.url}/api/v1/actions/{action.id}",
        params=params,
        headers={"Authorization": f"Bearer {token}"},
        timeout=40,
    )


def _reject_later(action, operator, *, after: float, reason: str) -> threading.Thread:
    def decide_later():
        try:
            time.sleep(after)
            reject(action, operator, reason=reason)
        finally:
            connection.close()

    thread = threading.Thread(target=decide_later)
    thread.start()
    return thread


@live
def test_a_long_poll_answers_as_soon_as_the_operator_rejects_and_carries_the_reason(
    live_server,
):
    tenant = make_tenant()
    token = make_token(tenant)
    action = make_action(make_run(tenant))
    operator = make_user(tenant, "operator")
    rejecter = _reject_later(action, operator, after=0.5, reason="wrong ticket")
    started = time.monotonic()
    answer = _get(live_server, token, action, wait=20)
    elapsed = time.monotonic() - started
    rejecter.join()
    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "rejected"
    assert (body["decision"]["outcome"], body["decision"]["reason"]) == ("reject", "wrong ticket")
    assert 0.4 < elapsed < 5


@live
def test_a_long_poll_holds_while_the_case_of_an_unknown_outcome_is_open(live_server):
    """An uncertain action is still heading for an outcome: the wait holds until the
    reconciler's resolution lands (here abandon, as case_resolve applies it), instead of
    answering at once and letting the agent poll into its rate limit."""
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    make_uncertain_with_case(action)

    def abandon_later():
        try:
            time.sleep(0.5)
            endings.action_abandon(action_pk=action.pk, reason="checked by hand", actor="ops")
        finally:
            connection.close()

    resolver = threading.Thread(target=abandon_later)
    resolver.start()
    started = time.monotonic()
    answer = _get(live_server, make_token(tenant), action, wait=20)
    elapsed = time.monotonic() - started
    resolver.join()

    body = answer.json()
    assert (body["status"], body["error_class"]) == ("failed", "abandoned")
    assert 0.4 < elapsed < 10


@live
def test_a_long_poll_without_news_answers_the_waiting_action_when_the_wait_ends(live_server):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    started = time.monotonic()
    answer = _get(live_server, make_token(tenant), action, wait=0.7)
    elapsed = time.monotonic() - started
    assert answer.json()["status"] == "waiting_approval"
    assert 0.7 <= elapsed < 3


@pytest.mark.django_db
def test_a_wait_above_30_seconds_is_clamped_and_a_settled_action_answers_at_once(api):
    action = make_action(make_run(api.tenant))
    approval_decide(
        action=action,
        approver=make_user(api.tenant, "operator"),
        decision="reject",
        seen_digest=action.intent_digest,
        seen_state_version=action.base_version,
    )
    started = time.monotonic()
    answer = api.get(f"/actions/{action.id}", wait=600)
    assert answer.status == 200
    assert time.monotonic() - started < 2


@pytest.mark.django_db
@pytest.mark.parametrize("wait", ["-1", "nan", "inf", "1e400", "soon"])
def test_a_wait_that_is_not_a_finite_non_negative_number_is_a_422(api, wait):
    action = make_action(make_run(api.tenant))
    problem = assert_problem(api.get(f"/actions/{action.id}", wait=wait), 422, "validation_error")
    assert problem["errors"][0]["loc"] == ["query", "wait"]
