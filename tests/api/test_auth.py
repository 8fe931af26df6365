"""Tenant-scoped bearer tokens: shown once, stored hashed, revocable, last use recorded."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from control.models import ApiToken
from control.services import api_token_revoke, token_hash
from runs.models import Run
from tests.api.conftest import ApiClient, assert_problem, make_token

pytestmark = pytest.mark.django_db


def test_a_request_without_a_token_is_a_401_problem_with_a_bearer_challenge(tenant):
    answer = ApiClient(None).get("/runs")
    assert_problem(answer, 401, "unauthorized")
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="countersign"'


@pytest.mark.parametrize(
    "authorization",
    ["Bearer cs_not-a-real-token", "Bearer ", "Basic dXNlcjpwYXNz", "cs_token-without-scheme"],
)
def test_an_unknown_or_malformed_token_is_a_401_problem(tenant, authorization):
    answer = ApiClient(None).get("/runs", headers={"Authorization": authorization})
    assert_problem(answer, 401, "unauthorized")
    assert 'error="invalid_token"' in answer.headers["WWW-Authenticate"]


def test_a_revoked_token_is_refused_and_a_post_with_it_writes_nothing(tenant):
    token = make_token(tenant, name="soon-revoked")
    assert ApiClient(token).get("/runs").status == 200
    api_token_revoke(tenant=tenant, name="soon-revoked", actor="tests")
    client = ApiClient(token)
    assert_problem(client.get("/runs"), 401, "unauthorized")
    assert_problem(client.post("/runs", {"goal": "g"}, key="k-1"), 401, "unauthorized")
    assert not Run.objects.exists()


def test_only_the_hash_is_stored_and_each_use_is_recorded(tenant):
    token = make_token(tenant, name="hashed")
    row = ApiToken.objects.get(name="hashed")
    assert token not in row.token_hash
    assert row.last_used_at is None
    assert ApiClient(token).get("/tools").status == 200
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_the_bearer_scheme_is_case_insensitive(tenant):
    token = make_token(tenant)
    answer = ApiClient(None).get("/tools", headers={"Authorization": f"bearer {token}"})
    assert answer.status == 200


def test_the_openapi_document_is_public_and_declares_bearer_auth(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.1")
    assert schema["components"]["securitySchemes"]["TokenAuth"] == {
        "type": "http",
        "scheme": "bearer",
    }


def test_a_token_printed_once_by_createapitoken_opens_the_api(tenant):
    out = StringIO()
    call_command(
        "createapitoken", "--tenant", tenant.name, "--name", "from-the-command", stdout=out
    )
    token = out.getvalue().strip()
    assert ApiClient(token).get("/runs").status == 200
    row = ApiToken.objects.get(name="from-the-command")
    assert row.token_hash == token_hash(token)
