"""`manage.py connectors check` names what is wrong and where; `connectors list` prints the
catalog with every tool's promises."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

pytestmark = pytest.mark.django_db

GOOD = """
[connectors.desk]
kind = "http"
base_url = "${DESK_URL}"

[connectors.desk.tools.close]
contract_version = "v3"
effect_class = "reconcilable"
path = "tickets/{target}/close"
receipt = { id = "{/id}" }
query = { path = "requests/{key}", absent = { status = 404 } }
target_schema = { type = "string", maxLength = 64 }
args_schema = { type = "object", properties = {}, additionalProperties = false }
"""


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("connectors", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_check_accepts_a_good_file_and_names_its_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("DESK_URL", "https://desk.example")
    good = tmp_path / "desk.toml"
    good.write_text(GOOD)
    out, _ = run("check", str(good))
    assert f"{good}: ok (desk.close v3)" in out


def test_check_reports_every_bad_file_by_place_and_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("DESK_URL", "https://desk.example")
    good, bad = tmp_path / "desk.toml", tmp_path / "bad.toml"
    good.write_text(GOOD)
    bad.write_text(GOOD.replace('"reconcilable"', '"sometimes"'))
    err = io.StringIO()
    with pytest.raises(CommandError, match="1 of 2 connector files have problems"):
        call_command("connectors", "check", str(good), str(bad), stderr=err, stdout=io.StringIO())
    assert f"{bad}, connector 'desk', tool 'close', field 'effect_class'" in err.getvalue()


def test_check_without_files_uses_the_configured_ones(settings):
    settings.SANDBOX_ENABLED = False
    settings.COUNTERSIGN_CONNECTORS = []
    with pytest.raises(CommandError, match="no connector files"):
        run("check")


def test_list_prints_each_tool_with_its_promises(tmp_path, monkeypatch, settings):
    monkeypatch.setenv("DESK_URL", "https://desk.example")
    good = tmp_path / "desk.toml"
    good.write_text(GOOD)
    settings.COUNTERSIGN_CONNECTORS = [str(good)]
    out, _ = run("list")
    lines = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert lines["desk.close"] == [
        "desk.close", "v3", "http", "reconcilable", "needs", "approval", "no", "dedupe",
        "queryable", "key", "alone",
    ]  # fmt: skip
    assert lines["notify.send"][3] == "not_retriable"  # the sandbox's, enabled in the tests
