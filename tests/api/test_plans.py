"""POST /api/v1/runs/{run_id}/plans: several intents frozen as one plan, answered with the
plan digest and each intent; the same plan again is 200; a bad item is refused naming it."""

from __future__ import annotations

import pytest

from control.foundation.canonical import canonical_json, content_hash
from runs.models import Action, Plan
from runs.services import plan_decide
from tests.api.conftest import assert_problem
from tests.api.support import content_hash as text_hash
from tests.factories import make_run, make_user

pytestmark = pytest.mark.django_db


def observe(api, run) -> str:
    answer = api.post(
        f"/runs/{run.id}/observations",
        {"source": "crm", "ref": "list-7", "content_hash": text_hash("x"), "summary": "who"},
    )
    return answer.body["id"]


def intents(count: int) -> list[dict]:
    return [
        {
            "action_id": f"notify-{n}",
            "tool": "notify.send",
            "target": f"OPS{n}@example.com ",
            "args": {"body": "the release is out"},
        }
        for n in range(1, count + 1)
    ]


def test_a_plan_is_frozen_and_answered_with_its_digest_and_intents(api):
    run = make_run(api.tenant)
    body = {"intents": intents(3), "observation_id": observe(api, run)}

    answer = api.post(f"/runs/{run.id}/plans", body)
    again = api.post(f"/runs/{run.id}/plans", body)

    assert (answer.status, again.status) == (201, 200), answer.body
    plan = answer.body
    assert (plan["status"], plan["size"], again.body["id"]) == ("waiting_approval", 3, plan["id"])
    digests = [intent["intent_digest"] for intent in plan["intents"]]
    assert plan["digest"] == content_hash(canonical_json(sorted(digests)))
    assert [i["target"] for i in plan["intents"]] == [f"ops{n}@example.com" for n in (1, 2, 3)]
    assert {i["status"] for i in plan["intents"]} == {"waiting_approval"}
    assert Action.objects.filter(plan_id=plan["id"]).count() == 3


def test_an_approved_plan_shows_each_intents_decision(api):
    run = make_run(api.tenant)
    answer = api.post(
        f"/runs/{run.id}/plans", {"intents": intents(2), "observation_id": observe(api, run)}
    )
    plan = Plan.objects.get(pk=answer.body["id"])
    plan_decide(
        plan=plan,
        approver=make_user(api.tenant, "operator"),
        decision="approve",
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
    )

    intent = api.get(f"/actions/{answer.body['intents'][1]['id']}").body

    assert intent["status"] == "approved"
    assert intent["decision"]["outcome"] == "approve"


def test_a_bad_plan_is_refused_naming_the_item_and_nothing_is_frozen(api):
    run = make_run(api.tenant)
    observation = observe(api, run)
    bad = intents(2)
    bad[1]["args"] = {"body": ""}

    refused = api.post(f"/runs/{run.id}/plans", {"intents": bad, "observation_id": observation})
    empty = api.post(f"/runs/{run.id}/plans", {"intents": [], "observation_id": observation})
    unjustified = api.post(f"/runs/{run.id}/plans", {"intents": intents(1)})

    assert "intents[1]" in assert_problem(refused, 422, "invalid_arguments")["detail"]
    assert_problem(empty, 422, "validation_error")
    assert (
        "must rest on an observation"
        in assert_problem(unjustified, 422, "invalid_arguments")["detail"]
    )
    assert not Plan.objects.exists()
    assert not Action.objects.exists()
