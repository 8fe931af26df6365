"""Idempotency-Key on POST with the IETF draft's semantics, against the real endpoints."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
import requests
from django.db import connection, transaction
from django.db.models.functions import Now
from django.http import HttpResponse
from django.test import RequestFactory

from control.api_kit.idempotency import KEY_TTL, execute_once, purge_expired, request_fingerprint
from control.models import ApiIdempotencyKey
from runs.models import Action, Run
from tests.api.conftest import ApiClient, assert_problem, make_token
from tests.api.support import content_hash
from tests.factories import make_run, make_tenant

pytestmark = pytest.mark.django_db


def test_the_same_key_ten_times_has_one_effect_and_ten_identical_answers(api):
    answers = [api.post("/runs", {"goal": "once only"}, key="run-key-1") for _ in range(10)]
    assert Run.objects.count() == 1
    assert {(answer.status, answer.content) for answer in answers} == {(201, answers[0].content)}
    assert "Idempotent-Replayed" not in answers[0].headers
    assert all(answer.headers["Idempotent-Replayed"] == "true" for answer in answers[1:])
    assert {answer.headers["Content-Type"] for answer in answers} == {
        "application/json; charset=utf-8"
    }
    record = ApiIdempotencyKey.objects.get()
    assert (record.state, record.response_status, record.key) == ("completed", 201, "run-key-1")


def test_a_refusal_is_replayed_too(api):
    run = make_run(api.tenant)
    body = {"evidence": {"action_ids": []}}
    first = api.post(f"/runs/{run.id}/complete", body, key="complete-1")
    again = api.post(f"/runs/{run.id}/complete", body, key="complete-1")
    assert_problem(first, 422, "missing_evidence")
    assert (again.status, again.content) == (first.status, first.content)
    assert again.headers["Content-Type"] == "application/problem+json"


def test_the_same_key_with_another_body_is_a_422_and_runs_nothing(api):
    assert api.post("/runs", {"goal": "first"}, key="k").status == 201
    answer = api.post("/runs", {"goal": "second"}, key="k")
    assert_problem(answer, 422, "idempotency_key_reused")
    assert list(Run.objects.values_list("goal", flat=True)) == ["first"]


def test_the_same_key_on_another_endpoint_is_a_422(api):
    run = make_run(api.tenant)
    assert api.post(f"/runs/{run.id}/cancel", {"reason": "x"}, key="k").status == 200
    other = make_run(api.tenant)
    assert_problem(
        api.post(f"/runs/{other.id}/cancel", {"reason": "x"}, key="k"),
        422,
        "idempotency_key_reused",
    )
    other.refresh_from_db()
    assert other.phase == "running"


def test_keys_are_scoped_to_the_tenant(api):
    other = ApiClient(make_token(make_tenant()))
    assert api.post("/runs", {"goal": "mine"}, key="shared").status == 201
    assert other.post("/runs", {"goal": "theirs"}, key="shared").status == 201
    assert Run.objects.count() == 2


def test_the_quoted_structured_field_form_is_the_same_key(api):
    first = api.post("/runs", {"goal": "g"}, key='"abc-123"')
    again = api.post("/runs", {"goal": "g"}, key="abc-123")
    assert (first.status, again.status) == (201, 201)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert Run.objects.count() == 1


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, '"unterminated', "caf\u00e9"])
def test_a_malformed_key_is_a_400_and_runs_nothing(api, key):
    answer = api.post("/runs", {"goal": "g"}, key=key)
    assert_problem(answer, 400, "idempotency_key_invalid")
    assert not Run.objects.exists()


def test_a_post_without_a_key_runs_each_time(api):
    api.post("/runs", {"goal": "g"})
    api.post("/runs", {"goal": "g"})
    assert Run.objects.count() == 2
    assert not ApiIdempotencyKey.objects.exists()


def test_an_action_proposal_replays_its_201_while_a_new_key_gets_the_200(api):
    run = make_run(api.tenant)
    observation = api.post(
        f"/runs/{run.id}/observations",
        {"source": "s", "ref": "r", "content_hash": content_hash("seen"), "summary": "seen"},
        key="obs-1",
    ).body
    proposal = {
        "action_id": "close-ticket",
        "tool": "ticket.close",
        "target": "ticket-7",
        "args": {"resolution": "fixed"},
        "contract_version": "v1",
        "observation_id": observation["id"],
    }
    first = api.post(f"/runs/{run.id}/actions", proposal, key="propose-1")
    replay = api.post(f"/runs/{run.id}/actions", proposal, key="propose-1")
    fresh = api.post(f"/runs/{run.id}/actions", proposal, key="propose-2")
    assert (first.status, replay.status, fresh.status) == (201, 201, 200)
    assert replay.content == first.content
    assert fresh.body["id"] == first.body["id"]
    assert Action.objects.count() == 1


def test_a_first_request_that_died_in_flight_is_run_by_the_retry(api):
    body = b'{"goal": "after a crash"}'
    # What a crashed first request leaves: its key claimed for this very request, unlocked,
    # and no effect (its transaction rolled back with the process).
    sent = RequestFactory().post("/api/v1/runs", body, content_type="application/json")
    ApiIdempotencyKey.objects.create(
        tenant=api.tenant, key="crashed", fingerprint=request_fingerprint(sent)
    )
    retry = api.post("/runs", body, key="crashed")
    assert retry.status == 201
    assert "Idempotent-Replayed" not in retry.headers
    assert Run.objects.count() == 1
    assert ApiIdempotencyKey.objects.get().state == "completed"


def test_a_server_error_frees_the_key_and_rolls_back_its_writes(tenant):
    def failing() -> HttpResponse:
        make_run(tenant, goal="half done")
        return HttpResponse("boom", status=500)

    with transaction.atomic():
        answer = execute_once(tenant=tenant, key="k", fingerprint="sha256:a", handler=failing)
    assert answer.status_code == 500
    assert not Run.objects.exists()
    assert not ApiIdempotencyKey.objects.exists()
    # Freed: the same key now runs a different request.
    answer = execute_once(
        tenant=tenant, key="k", fingerprint="sha256:b", handler=lambda: HttpResponse(status=201)
    )
    assert answer.status_code == 201


def test_keys_older_than_24_hours_are_purged_and_then_free(api):
    assert api.post("/runs", {"goal": "yesterday"}, key="old").status == 201
    assert api.post("/runs", {"goal": "today"}, key="new").status == 201
    ApiIdempotencyKey.objects.filter(key="old").update(
        created_at=Now() - KEY_TTL - timedelta(minutes=1)
    )
    assert purge_expired() == 1
    assert list(ApiIdempotencyKey.objects.values_list("key", flat=True)) == ["new"]
    assert api.post("/runs", {"goal": "another"}, key="old").status == 201
    assert Run.objects.count() == 3


def test_a_key_past_its_ttl_counts_as_unused_before_the_sweep(api):
    assert api.post("/runs", {"goal": "first"}, key="stale").status == 201
    ApiIdempotencyKey.objects.update(created_at=Now() - KEY_TTL - timedelta(seconds=1))
    answer = api.post("/runs", {"goal": "second"}, key="stale")
    assert answer.status == 201
    assert Run.objects.count() == 2
    record = ApiIdempotencyKey.objects.get()
    assert record.state == "completed"


@pytest.mark.django_db(transaction=True)
def test_the_same_key_while_the_first_request_is_in_flight_is_a_409():
    tenant = make_tenant()
    api = ApiClient(make_token(tenant), tenant)
    body = b'{"goal": "slow"}'
    locked, release = threading.Event(), threading.Event()

    # Stands for the first request: it claimed the key and holds it in its transaction.
    record = ApiIdempotencyKey.objects.create(
        tenant=tenant, key="busy", fingerprint="sha256:" + "0" * 64
    )

    def first_request_in_flight():
        try:
            with transaction.atomic():
                ApiIdempotencyKey.objects.select_for_update().get(pk=record.pk)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=first_request_in_flight)
    holder.start()
    try:
        assert locked.wait(10)
        answer = api.post("/runs", body, key="busy")
    finally:
        release.set()
        holder.join()
    assert_problem(answer, 409, "idempotency_key_in_flight")
    assert answer.headers["Retry-After"] == "1"
    assert not Run.objects.exists()
    record.refresh_from_db()
    assert record.state == "in_flight"


@pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
def test_a_hundred_parallel_requests_with_one_key_create_one_run(live_server):
    tenant = make_tenant()
    token = make_token(tenant)
    # 100 requests, 24 at a time: each live-server thread holds a PostgreSQL connection (the
    # server allows 100 in all, shared with everything else running), and the live server's
    # listen backlog is 10, so the opening wave released together by the barrier is 8.
    parallel, opening_wave = 24, 8
    barrier = threading.Barrier(opening_wave)
    url = live_server.url + "/api/v1/runs"
    headers = {
        "Authorization": f"Bearer {token}",
        "Idempotency-Key": "parallel-1",
        "Content-Type": "application/json",
    }

    def send(number: int) -> requests.Response:
        if number < opening_wave:
            barrier.wait(10)
        return requests.post(url, data=b'{"goal": "exactly once"}', headers=headers, timeout=60)

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        answers = list(pool.map(send, range(100)))
    assert Run.objects.count() == 1
    created = [a for a in answers if a.status_code == 201]
    in_flight = [a for a in answers if a.status_code == 409]
    assert len(created) + len(in_flight) == 100, sorted({a.status_code for a in answers})
    assert {a.content for a in created} == {created[0].content}
    assert all(a.json()["code"] == "idempotency_key_in_flight" for a in in_flight)
    # Exactly one request ran; every other 201 is its stored answer replayed.
    assert sum("Idempotent-Replayed" not in a.headers for a in created) == 1
