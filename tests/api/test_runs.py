"""Runs over the API: create, list (paginated), read, tools; refusals as problem+json."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runs.models import Run, RunEvent
from tests.api.conftest import assert_problem
from tests.factories import make_policy, make_run, make_tenant

pytestmark = pytest.mark.django_db


def test_creating_a_run_answers_201_with_its_state_version_and_budget(api):
    deadline = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    answer = api.post(
        "/runs",
        {
            "goal": "close ticket-7 once the customer confirmed",
            "plan": {"steps": ["look up", "close"]},
            "budget": 5,
            "deadline": deadline,
            "versions": {"runner": "demo-1", "model": "m-2"},
        },
    )
    assert answer.status == 201, answer.body
    run = Run.objects.get(pk=answer.body["id"])
    assert run.tenant == api.tenant
    assert run.created_by == "token:agent"
    body = answer.body
    assert body["phase"] == "running"
    assert body["state_version"] == run.state_version >= 1
    assert body["budget"] == {"limit": 5, "used": 0}
    assert body["plan"] == {"steps": ["look up", "close"]}
    assert body["versions"] == {"runner": "demo-1", "model": "m-2"}
    assert datetime.fromisoformat(body["deadline"]) == datetime.fromisoformat(deadline)
    assert RunEvent.objects.filter(run=run, type="run.started").count() == 1


def test_a_run_needs_only_a_goal(api):
    answer = api.post("/runs", {"goal": "g"})
    assert answer.status == 201
    assert answer.body["budget"] == {"limit": None, "used": 0}
    assert answer.body["deadline"] is None


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({}, "goal"),
        ({"goal": ""}, "goal"),
        ({"goal": 7}, "goal"),
        ({"goal": "g", "budget": "5"}, "budget"),
        ({"goal": "g", "budget": 5.0}, "budget"),
        ({"goal": "g", "budget": True}, "budget"),
        ({"goal": "g", "budget": 0}, "budget"),
        ({"goal": "g", "deadline": "2031-01-01T00:00:00"}, "deadline"),
        ({"goal": "g", "deadline": 1_900_000_000}, "deadline"),
        ({"goal": "g", "plan": ["a list"]}, "plan"),
        ({"goal": "g", "unknown": 1}, "unknown"),
    ],
)
def test_a_body_that_breaks_the_schema_is_a_422_naming_the_field(api, body, where):
    problem = assert_problem(api.post("/runs", body), 422, "validation_error")
    assert any(where in error["loc"] for error in problem["errors"]), problem
    assert not Run.objects.exists()


def test_a_deadline_in_the_past_is_a_422_invalid_arguments(api):
    answer = api.post("/runs", {"goal": "g", "deadline": "2001-01-01T00:00:00Z"})
    assert_problem(answer, 422, "invalid_arguments")


def test_a_plan_without_a_canonical_form_is_refused_before_anything_is_written(api):
    # 2**53 + 1 has no double that spells it: the signed checkpoint could not hold it.
    answer = api.post("/runs", {"goal": "g", "plan": {"n": 2**53 + 1}})
    assert_problem(answer, 422, "invalid_arguments")
    assert not Run.objects.exists()


def test_the_run_list_is_paginated_newest_first_with_a_next_link(api, django_assert_num_queries):
    created = [make_run(api.tenant, goal=f"goal {number}") for number in range(25)]
    make_run(make_tenant(), goal="another tenant's run")
    # token lookup, its last-use write, the count, the page and the page's completed work
    with django_assert_num_queries(5):
        first = api.get("/runs", limit=10)
    assert first.status == 200
    assert first.body["count"] == 25
    assert [run["goal"] for run in first.body["items"]] == [f"goal {n}" for n in range(24, 14, -1)]
    assert first.body["next"].endswith("/api/v1/runs?limit=10&offset=10")
    last = api.get("/runs", limit=10, offset=20)
    assert [run["id"] for run in last.body["items"]] == [str(r.id) for r in created[4::-1]]
    assert last.body["next"] is None


def test_the_run_list_filters_by_phase_and_refuses_bad_paging(api):
    make_run(api.tenant)
    assert api.get("/runs", phase="running").body["count"] == 1
    assert api.get("/runs", phase="completed").body["count"] == 0
    for params in ({"limit": 0}, {"limit": 101}, {"offset": -1}, {"phase": "done"}):
        assert_problem(api.get("/runs", **params), 422, "validation_error")


def test_a_run_reads_back_with_its_fields(api):
    run = make_run(api.tenant, budget_limit=3)
    answer = api.get(f"/runs/{run.id}")
    assert answer.status == 200
    assert answer.body["id"] == str(run.id)
    assert answer.body["budget"] == {"limit": 3, "used": 0}
    assert answer.body["state_version"] == run.state_version


@pytest.mark.parametrize("run_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_an_unknown_run_is_a_404_problem(api, run_id):
    assert_problem(api.get(f"/runs/{run_id}"), 404, "not_found")


def test_tools_list_names_versions_approval_and_argument_schemas(api):
    make_policy(api.tenant, "notify.send", needs_approval=False)
    answer = api.get("/tools")
    assert answer.status == 200
    tools = {tool["name"]: tool for tool in answer.body}
    assert {"ticket.close", "ticket.lookup", "notify.send"} <= set(tools)
    close = tools["ticket.close"]
    assert close["contract_version"] == "v1"
    assert close["needs_approval"] is True
    assert close["args_schema"]["type"] == "object"
    assert close["args_schema"]["additionalProperties"] is False
    # This tenant's policy, not the tool's default.
    assert tools["notify.send"]["needs_approval"] is False
    assert (close["connector"], close["kind"]) == ("ticket", "http")
    assert close["capabilities"] == ["dedupes by key", "can be queried by key"]
    assert close["echoes_digest"] is True
    assert close["description"] == "Close a ticket, with an optional resolution."
    assert tools["notify.send"]["capabilities"] == [
        "a resend is a second effect",
        "cannot be queried",
    ]
