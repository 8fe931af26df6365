"""The sandbox belongs to the demo: /sandbox/ and the sandbox's tools exist only while
SANDBOX_ENABLED is on (the test settings turn it on; each test here runs both ways).
control.settings_production refuses it: tests/security/test_production_settings.py."""

from __future__ import annotations

import importlib

import pytest
from django.conf import settings
from django.test import override_settings
from django.urls import Resolver404, clear_url_caches, resolve

from runs.models import Action
from runs.tools.connectors.files import load_files
from runs.tools.errors import UnsupportedTool
from runs.tools.registry import all_tools, get_tool
from tests.api.conftest import ApiClient, assert_problem, make_token
from tests.factories import make_observation, make_run, make_tenant

pytestmark = pytest.mark.django_db(databases=["default", "sandbox"])

SANDBOX_TOOL_NAMES = frozenset(
    {"ticket.lookup", "ticket.close", "notify.send", "payment.charge", "payment.refund"}
)


def _reload_urlconf() -> None:
    # control.urls reads the setting when it is imported: import it again under the new value.
    clear_url_caches()
    importlib.reload(importlib.import_module(settings.ROOT_URLCONF))


@pytest.fixture(params=[True, False], ids=["sandbox-on", "sandbox-off"])
def sandbox_enabled(request):
    with override_settings(SANDBOX_ENABLED=request.param):
        _reload_urlconf()
        yield request.param
    _reload_urlconf()


@pytest.fixture
def api() -> ApiClient:
    tenant = make_tenant()
    return ApiClient(make_token(tenant), tenant)


def test_the_sandbox_tool_names_are_the_ones_the_demo_connectors_define():
    # Guards the checks below: an empty or renamed set would let them pass vacuously.
    environ = {"COUNTERSIGN_SANDBOX_URL": "http://127.0.0.1:9/sandbox/"}
    demo = load_files([settings.COUNTERSIGN_DEMO_CONNECTORS], environ=environ)
    assert {tool.name for tool in demo} == SANDBOX_TOOL_NAMES


def test_sandbox_urls_are_mounted_only_while_it_is_enabled(sandbox_enabled, client):
    answer = client.get("/sandbox/effects")

    if sandbox_enabled:
        assert answer.status_code == 200
        assert resolve("/sandbox/tickets/ticket-7").namespace == "sandbox"
    else:
        assert answer.status_code == 404
        for path in ("/sandbox/effects", "/sandbox/tickets/ticket-7", "/sandbox/faults"):
            with pytest.raises(Resolver404):
                resolve(path)


def test_sandbox_tools_are_registered_only_while_it_is_enabled(sandbox_enabled, noop_tool):
    names = {tool.name for tool in all_tools()}

    assert "bench.noop" in names  # a registered tool stays, whatever the switch
    if sandbox_enabled:
        assert names >= SANDBOX_TOOL_NAMES
        assert get_tool("ticket.close").name == "ticket.close"
    else:
        assert names.isdisjoint(SANDBOX_TOOL_NAMES)
        for name in SANDBOX_TOOL_NAMES:
            with pytest.raises(UnsupportedTool, match=f"unknown tool '{name}'.*not configured"):
                get_tool(name)
        with pytest.raises(UnsupportedTool, match="not configured"):
            get_tool("ticket.close", "v1")


def test_the_api_lists_the_sandbox_tools_only_while_it_is_enabled(sandbox_enabled, api):
    answer = api.get("/tools")

    assert answer.status == 200, answer.body
    names = {tool["name"] for tool in answer.body}
    if sandbox_enabled:
        assert names >= SANDBOX_TOOL_NAMES
    else:
        assert names.isdisjoint(SANDBOX_TOOL_NAMES)


def test_a_proposal_for_a_sandbox_tool_is_a_422_naming_it_while_it_is_disabled(
    sandbox_enabled, api
):
    run = make_run(api.tenant)
    body = {
        "action_id": "close-ticket",
        "tool": "ticket.close",
        "target": "ticket-7",
        "args": {"resolution": "fixed"},
        "contract_version": "v1",
        "observation_id": str(make_observation(run).id),
    }

    answer = api.post(f"/runs/{run.id}/actions", body)

    if sandbox_enabled:
        assert answer.status == 201, answer.body
        assert Action.objects.filter(run=run, tool="ticket.close").count() == 1
    else:
        problem = assert_problem(answer, 422, "invalid_arguments")
        assert "'ticket.close'" in problem["detail"]
        assert "not configured on this server" in problem["detail"]
        assert not Action.objects.exists()
