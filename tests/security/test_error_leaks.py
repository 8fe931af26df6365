"""A failure shows a generic answer: no traceback, exception text or internal URL reaches an
agent's problem+json or a person's error page; the details go to the log only."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from bench.tools import BenchNoop
from tests.api.conftest import ApiClient, assert_problem, make_token
from tests.factories import make_run
from tests.registry import registered
from tests.security.crashing_urls import INTERNAL_DETAIL

pytestmark = pytest.mark.django_db


class CrashingTool(BenchNoop):
    """A tool plugin with a bug: normalizing a target raises what no handler expects."""

    name = "tests.crashing"

    def prepare_target(self, target: str) -> str:
        raise RuntimeError(f"{INTERNAL_DETAIL}: {settings.REDIS_URL} {settings.SANDBOX_URL}")


def leaked(text: str) -> list[str]:
    signs = ("Traceback", "RuntimeError", INTERNAL_DETAIL, settings.REDIS_URL, settings.SANDBOX_URL)
    return [sign for sign in signs if sign in text]


def test_an_unexpected_error_in_the_api_is_a_generic_500_problem(tenant, caplog):
    api = ApiClient(make_token(tenant), tenant)
    run = make_run(tenant)
    with registered(CrashingTool()):
        answer = api.post(
            f"/runs/{run.id}/actions",
            {
                "action_id": "crash-1",
                "tool": "tests.crashing",
                "target": "item-1",
                "args": {},
                "contract_version": "v1",
            },
        )
    problem = assert_problem(answer, 500, "internal_error")
    assert problem["detail"] == "an unexpected error occurred; it was logged"
    assert leaked(answer.content.decode()) == []
    assert INTERNAL_DETAIL in caplog.text  # the operators of the server still learn what broke


@pytest.mark.urls("tests.security.crashing_urls")
def test_the_500_page_shows_no_traceback_nor_internal_detail(settings, caplog):
    settings.DEBUG = False
    response = Client(raise_request_exception=False).get("/crash/")
    page = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong" in page
    assert leaked(page) == []
    assert INTERNAL_DETAIL in caplog.text
