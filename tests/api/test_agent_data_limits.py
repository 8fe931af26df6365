"""Agent data has documented size limits (runs.limits): a goal, a run's plan and versions,
an observation's summary. Past one the API answers 422 naming the field and the limit, and
writes nothing; exactly at the limit it is kept."""

from __future__ import annotations

import pytest

from runs import limits
from runs.models import Observation, Run, RunEvent
from tests.api.conftest import assert_problem
from tests.factories import make_run

pytestmark = pytest.mark.django_db

# A plan whose canonical JSON is exactly `size` bytes: {"notes":"xxx..."}.
PLAN_OVERHEAD = len('{"notes":""}')


def _plan_of(size: int) -> dict:
    return {"notes": "x" * (size - PLAN_OVERHEAD)}


@pytest.mark.parametrize(
    ("body", "field", "limit"),
    [
        ({"goal": "g" * (limits.GOAL_MAX_CHARS + 1)}, "goal", "2000 characters"),
        (
            {"goal": "ship", "plan": _plan_of(limits.PLAN_MAX_BYTES + 1)},
            "plan",
            "65536 bytes of canonical JSON",
        ),
        (
            {"goal": "ship", "versions": {f"k{n}": "1" for n in range(33)}},
            "versions",
            "32 keys",
        ),
        ({"goal": "ship", "versions": {"model": "m" * 201}}, "versions['model']", "200 characters"),
        ({"goal": "ship", "versions": {"k" * 201: "1"}}, "versions key", "200 characters"),
        (
            {"goal": "ship", "versions": {"model": {"deep": "m" * 200}}},
            "versions['model']",
            "200 characters",
        ),
    ],
    ids=["goal", "plan", "versions-keys", "versions-value", "versions-key", "versions-object"],
)
def test_a_run_past_a_size_limit_is_a_422_naming_the_field_and_limit_and_writes_nothing(
    api, body, field, limit
):
    problem = assert_problem(api.post("/runs", body), 422, "invalid_arguments")

    assert problem["detail"].startswith(field)
    assert f"the limit is {limit}" in problem["detail"]
    assert problem["rule"] == "too_large"
    assert not Run.objects.exists()
    assert not RunEvent.objects.exists()


def test_a_run_exactly_at_every_limit_is_started(api):
    answer = api.post(
        "/runs",
        {
            "goal": "g" * limits.GOAL_MAX_CHARS,
            "plan": _plan_of(limits.PLAN_MAX_BYTES),
            "versions": {f"k{n}": "v" * limits.VERSIONS_MAX_CHARS for n in range(32)},
        },
    )

    assert answer.status == 201, answer.body
    assert len(Run.objects.get().goal) == limits.GOAL_MAX_CHARS


def test_an_observation_summary_past_its_limit_is_a_422_and_writes_nothing(api):
    run = make_run(api.tenant)
    events = RunEvent.objects.filter(run=run).count()
    body = {"source": "desk", "ref": "t-7", "content_hash": "sha256:" + "0" * 64}

    refused = api.post(
        f"/runs/{run.id}/observations", {**body, "summary": "s" * (limits.SUMMARY_MAX_CHARS + 1)}
    )
    kept = api.post(
        f"/runs/{run.id}/observations", {**body, "summary": "s" * limits.SUMMARY_MAX_CHARS}
    )

    problem = assert_problem(refused, 422, "invalid_arguments")
    assert problem["detail"].startswith("summary is 2001 characters; the limit is 2000")
    assert kept.status == 201
    assert Observation.objects.filter(run=run).count() == 1
    assert RunEvent.objects.filter(run=run).count() == events + 1


def test_the_openapi_schema_documents_the_limits(client):
    schemas = client.get("/api/v1/openapi.json").json()["components"]["schemas"]

    assert schemas["RunIn"]["properties"]["goal"]["maxLength"] == limits.GOAL_MAX_CHARS
    assert schemas["ObservationIn"]["properties"]["summary"]["maxLength"] == 2000
    versions = schemas["RunIn"]["properties"]["versions"]
    assert versions["maxProperties"] == limits.VERSIONS_MAX_KEYS
    assert "65536 bytes" in schemas["RunIn"]["properties"]["plan"]["description"]
