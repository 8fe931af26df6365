"""The agent API through Django's test client, authenticated with a real tenant token."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from control.models import Tenant
from control.services import api_token_create
from tests.factories import make_tenant

API = "/api/v1"


@dataclass
class Answer:
    status: int
    headers: Any
    body: Any
    content: bytes

    @property
    def problem_code(self) -> str | None:
        return self.body.get("code") if isinstance(self.body, dict) else None


class ApiClient:
    """Sends JSON (or raw bytes) with `Authorization: Bearer <token>`; parses any JSON answer."""

    def __init__(self, token: str | None, tenant: Tenant | None = None) -> None:
        self.client = Client()
        self.token = token
        self.tenant = tenant

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        sent = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        sent.update(headers or {})
        return sent

    def get(self, path: str, headers: dict[str, str] | None = None, **params: Any) -> Answer:
        response = self.client.get(API + path, params, headers=self._headers(headers))
        return _answer(response)

    def post(
        self,
        path: str,
        body: Any = None,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        data = body if isinstance(body, bytes | str) else json.dumps(body)
        sent = self._headers(headers)
        if key is not None:
            sent["Idempotency-Key"] = key
        response = self.client.post(API + path, data, content_type="application/json", headers=sent)
        return _answer(response)


def _answer(response) -> Answer:
    content = response.content
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = content.decode(errors="replace")
    return Answer(response.status_code, response.headers, body, content)


def make_token(tenant: Tenant, name: str = "agent") -> str:
    _, token = api_token_create(tenant=tenant, name=name, actor="tests")
    return token


@pytest.fixture
def tenant(db) -> Tenant:
    return make_tenant()


@pytest.fixture
def api(tenant) -> ApiClient:
    return ApiClient(make_token(tenant), tenant)


def assert_problem(answer: Answer, status: int, code: str) -> dict:
    assert answer.status == status, answer.body
    assert answer.headers["Content-Type"] == "application/problem+json"
    problem = answer.body
    assert problem["type"] == f"urn:countersign:problem:{code}"
    assert (problem["status"], problem["code"]) == (status, code)
    assert problem["title"]
    assert problem["detail"]
    return problem
