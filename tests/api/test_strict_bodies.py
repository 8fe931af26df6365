"""Bodies the strict parser refuses: 400 problem+json naming the rule and path, nothing written."""

from __future__ import annotations

import pytest

from control.models import ApiIdempotencyKey
from runs.models import Action, Observation, Run, RunEvent
from tests.api.conftest import assert_problem
from tests.factories import make_run

pytestmark = pytest.mark.django_db

NESTED = "{" + '"a":{' * 40 + "}" * 40 + "}"
REFUSED = [
    pytest.param(b'{"goal": "a", "goal": "b"}', "duplicate_key", "$", id="duplicate-key"),
    pytest.param(b'{"goal": "g", "budget": NaN}', "non_finite_number", "$.budget", id="nan"),
    pytest.param(b'{"goal": "g", "budget": -Infinity}', "non_finite_number", "$.budget", id="inf"),
    pytest.param(b'{"goal": "g", "plan": {"x": 1e400}}', "number_overflow", "$.plan.x", id="1e400"),
    pytest.param(b'{"goal": "\\ud800"}', "lone_surrogate", "$.goal", id="lone-surrogate"),
    pytest.param(b'{"goal": "g"} {"goal": "h"}', "trailing_data", "$", id="trailing-data"),
    pytest.param(f'{{"goal": "g", "plan": {NESTED}}}'.encode(), "too_deep", None, id="too-deep"),
    pytest.param(
        b'{"goal": "' + b"x" * 1_000_001 + b'"}', "too_large", "$", id="too-big-for-the-parser"
    ),
    pytest.param(
        b'{"goal": "' + b"x" * 3_000_000 + b'"}', "too_large", "$", id="too-big-for-django"
    ),
    pytest.param(b'{"goal": "\xff"}', "invalid_utf8", "$", id="invalid-utf8"),
    pytest.param(b"\xef\xbb\xbf" + b'{"goal": "g"}', "byte_order_mark", "$", id="bom"),
    pytest.param(b"{goal: 1}", "syntax", "$", id="syntax"),
    pytest.param(b'["goal"]', "not_an_object", "$", id="array"),
    pytest.param(b"null", "not_an_object", "$", id="null"),
]


def _nothing_written() -> None:
    assert not Run.objects.exists()
    assert not RunEvent.objects.exists()
    assert not ApiIdempotencyKey.objects.exists()


@pytest.mark.parametrize("key", [None, "refused-body-key"])
@pytest.mark.parametrize(("body", "rule", "path"), REFUSED)
def test_a_body_the_strict_parser_refuses_is_a_400_and_writes_nothing(api, body, rule, path, key):
    answer = api.post("/runs", body, key=key)
    problem = assert_problem(answer, 400, "invalid_json")
    assert problem["rule"] == rule
    if path is not None:
        assert problem["path"] == path
    else:
        assert problem["path"].startswith("$.plan.a.a")
    _nothing_written()


@pytest.mark.parametrize("key", [None, "nul-key"])
def test_a_nul_character_anywhere_is_a_422_naming_its_path(api, key):
    answer = api.post("/runs", b'{"goal": "g", "plan": {"steps": ["ok", "a\\u0000b"]}}', key=key)
    problem = assert_problem(answer, 422, "validation_error")
    assert problem["errors"][0]["loc"] == ["body", '$["plan"]["steps"][1]']
    _nothing_written()


def test_refused_bodies_write_nothing_on_the_action_and_observation_endpoints(api):
    run = make_run(api.tenant)
    events = RunEvent.objects.count()
    duplicate = b'{"action_id": "a", "action_id": "b", "tool": "ticket.close"}'
    answer = api.post(f"/runs/{run.id}/actions", duplicate, key="k")
    assert assert_problem(answer, 400, "invalid_json")["rule"] == "duplicate_key"
    answer = api.post(f"/runs/{run.id}/observations", b'{"summary": NaN}')
    assert assert_problem(answer, 400, "invalid_json")["rule"] == "non_finite_number"
    assert not Action.objects.exists()
    assert not Observation.objects.exists()
    assert RunEvent.objects.count() == events


def test_an_empty_body_is_a_422_for_the_missing_fields(api):
    answer = api.post("/runs", b"")
    assert_problem(answer, 422, "validation_error")
    _nothing_written()
