"""The OpenAPI 3.1 document says what every endpoint does: errors, auth, Idempotency-Key."""

from __future__ import annotations

import pytest

from tests.api.conftest import ApiClient, assert_problem

pytestmark = pytest.mark.django_db

ENDPOINTS = {
    ("post", "/api/v1/runs"),
    ("get", "/api/v1/runs"),
    ("get", "/api/v1/runs/{run_id}"),
    ("get", "/api/v1/tools"),
    ("post", "/api/v1/runs/{run_id}/observations"),
    ("post", "/api/v1/runs/{run_id}/actions"),
    ("get", "/api/v1/runs/{run_id}/actions"),
    ("post", "/api/v1/runs/{run_id}/plans"),
    ("get", "/api/v1/actions/{id}"),
    ("post", "/api/v1/runs/{run_id}/complete"),
    ("post", "/api/v1/runs/{run_id}/cancel"),
    ("get", "/api/v1/runs/{run_id}/checkpoint"),
}


@pytest.fixture
def document(client) -> dict:
    return client.get("/api/v1/openapi.json").json()


def _operations(document: dict):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            yield method, path, operation


def test_the_document_lists_exactly_the_interface_endpoints(document):
    assert {(method, path) for method, path, _ in _operations(document)} == ENDPOINTS


def test_every_operation_needs_the_bearer_token_and_documents_its_401(document):
    for method, path, operation in _operations(document):
        assert operation["security"] == [{"TokenAuth": []}], (method, path)
        assert "401" in operation["responses"], (method, path)


def test_every_error_answer_is_documented_as_problem_json(document):
    for method, path, operation in _operations(document):
        for status, response in operation["responses"].items():
            expected = "application/problem+json" if int(status) >= 400 else "application/json"
            assert list(response["content"]) == [expected], (method, path, status)


def test_every_post_accepts_an_idempotency_key(document):
    for method, path, operation in _operations(document):
        names = {(p["in"], p["name"]) for p in operation.get("parameters", [])}
        assert (("header", "Idempotency-Key") in names) == (method == "post"), (method, path)


def test_request_bodies_forbid_unknown_fields(document):
    for name in ("RunIn", "ObservationIn", "ActionIn", "CompleteIn", "EvidenceIn", "CancelIn"):
        assert document["components"]["schemas"][name]["additionalProperties"] is False, name


def test_the_description_documents_the_24_hour_key_retention(document):
    assert "Keys are kept 24" in document["info"]["description"]


@pytest.mark.parametrize("path", ["/nope", "/runs/a/b/c"])
def test_an_unknown_endpoint_is_a_problem_json_404(api, path):
    assert_problem(api.get(path), 404, "not_found")
    assert_problem(ApiClient(None).post(path, {}), 404, "not_found")


def test_an_unknown_query_parameter_is_refused_so_a_typo_is_not_silent(api):
    problem = assert_problem(api.get("/tools", wiat="30"), 422, "validation_error")
    assert problem["errors"] == [
        {"loc": ["query", "wiat"], "msg": "unknown parameter", "type": "extra_forbidden"}
    ]
