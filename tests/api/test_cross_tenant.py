"""A token of another tenant gets 404 for every object, and its requests change nothing."""

from __future__ import annotations

import pytest

from runs.models import Action, Observation, Run, RunEvent
from tests.api.conftest import ApiClient, assert_problem, make_token
from tests.api.support import content_hash
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def foreign(tenant) -> dict:
    """Another tenant's run with an observation and an approved action."""
    owner = make_tenant()
    run = make_run(owner)
    action = make_action(run)
    approve(action, make_user(owner, "operator"))
    return {"run": run, "action": action, "observation": action.observation}


def _requests(foreign: dict) -> list[tuple[str, str, dict | None]]:
    run, action = foreign["run"].id, foreign["action"].id
    return [
        ("get", f"/runs/{run}", None),
        ("get", f"/runs/{run}/checkpoint", None),
        ("get", f"/actions/{action}", None),
        (
            "post",
            f"/runs/{run}/observations",
            {"source": "s", "ref": "r", "content_hash": content_hash("x"), "summary": "x"},
        ),
        (
            "post",
            f"/runs/{run}/actions",
            {
                "action_id": "close-ticket",
                "tool": "ticket.close",
                "target": "ticket-7",
                "args": {"resolution": "fixed"},
                "contract_version": "v1",
                "observation_id": str(foreign["observation"].id),
            },
        ),
        ("post", f"/runs/{run}/complete", {"evidence": {"action_ids": ["close-ticket"]}}),
        ("post", f"/runs/{run}/cancel", {"reason": "not mine"}),
    ]


def test_every_object_of_another_tenant_is_a_404_and_nothing_changes(api, foreign):
    events = RunEvent.objects.count()
    for method, path, body in _requests(foreign):
        if method == "get":
            # The long-poll is not a way to see another tenant's action either.
            answer = api.get(path, **({"wait": 1} if path.startswith("/actions/") else {}))
        else:
            answer = api.post(path, body, key=f"cross-{path}")
        problem = assert_problem(answer, 404, "not_found")
        assert "close-ticket" not in problem["detail"], path
    assert RunEvent.objects.count() == events
    assert Observation.objects.count() == 1
    assert Action.objects.get().status == "approved"
    assert Run.objects.get().phase == "executing"


def test_the_run_list_shows_only_the_tokens_own_tenant(api, foreign):
    mine = make_run(api.tenant)
    answer = api.get("/runs")
    assert [run["id"] for run in answer.body["items"]] == [str(mine.id)]
    assert answer.body["count"] == 1


def test_the_same_object_answers_its_own_tenant(foreign):
    owner = ApiClient(make_token(foreign["run"].tenant))
    for method, path, _ in _requests(foreign):
        if method == "get":
            assert owner.get(path).status == 200, path
