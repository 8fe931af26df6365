"""A tool's meaning is frozen per contract version: the first intent stores its definition,
a changed definition under the same version is refused at proposal and at start, and a new
contract version is the way to change it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from runs.exceptions import DefinitionChanged
from runs.models import ToolDefinition
from tests.factories import make_action, make_run, make_tenant
from tests.processes import ROOT
from tests.registry import connector_tools, registered

pytestmark = pytest.mark.django_db

DESK = """
[connectors.desk]
kind = "http"
base_url = "https://desk.example/api"

[connectors.desk.tools.close]
contract_version = "{version}"
effect_class = "idempotent"
target_schema = {{ type = "string", maxLength = 64 }}
path = "{path}"
idempotency_header = "Idempotency-Key"
receipt = {{ id = "{{/id}}" }}
args_schema = {{ type = "object", properties = {{}}, additionalProperties = false }}
"""


def desk(tmp_path, *, version="v1", path="tickets/{target}/close"):
    [tool] = connector_tools(tmp_path, DESK.format(version=version, path=path))
    return tool


def test_the_first_intent_freezes_the_definition_and_a_changed_one_is_refused(tmp_path):
    tenant = make_tenant()
    original = desk(tmp_path)
    with registered(original):
        make_action(make_run(tenant), action_id="close-1", tool="desk.close", args={})
    stored = ToolDefinition.objects.get(tool="desk.close", contract_version="v1")
    assert stored.digest == original.definition_digest()
    assert stored.definition["path"] == "tickets/{target}/close"

    changed = desk(tmp_path, path="tickets/{target}/delete")
    refused_run = make_run(tenant)
    with registered(changed), pytest.raises(DefinitionChanged, match="a new contract_version"):
        make_action(refused_run, action_id="close-2", tool="desk.close", args={})
    assert refused_run.actions.count() == 0

    with registered(desk(tmp_path, version="v2", path="tickets/{target}/delete")):
        make_action(
            refused_run, action_id="close-2", tool="desk.close", args={}, contract_version="v2"
        )
    assert refused_run.actions.get().contract_version == "v2"

    with registered(original):  # the same meaning again: accepted
        make_action(make_run(tenant), action_id="close-3", tool="desk.close", args={})
    assert ToolDefinition.objects.filter(tool="desk.close").count() == 2


def test_the_connectors_check_refuses_a_changed_definition_and_a_broken_file(tmp_path, settings):
    run = make_run(make_tenant())
    with registered(desk(tmp_path)):
        make_action(run, action_id="close-1", tool="desk.close", args={})
        call_command("check", tags=["connectors"])  # unchanged: fine

    changed = desk(tmp_path, path="tickets/{target}/delete")
    with registered(changed), pytest.raises(SystemCheckError, match=r"countersign\.E102"):
        call_command("check", tags=["connectors"])

    broken = tmp_path / "broken.toml"
    broken.write_text(DESK.format(version="v1", path="t").replace("https://desk", "${DESK_URL}"))
    settings.COUNTERSIGN_CONNECTORS = [str(broken)]
    with pytest.raises(SystemCheckError, match="environment variable DESK_URL is not set"):
        call_command("check", tags=["connectors"])


def test_a_worker_does_not_start_with_a_broken_connector_file(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text(DESK.format(version="v1", path="t").replace("https://desk", "${DESK_URL}"))
    started = subprocess.run(
        [sys.executable, "manage.py", "rqworker", "--burst", "countersign-none"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "COUNTERSIGN_CONNECTORS": str(broken),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert "environment variable DESK_URL is not set" in started.stderr
    assert "field 'base_url'" in started.stderr
