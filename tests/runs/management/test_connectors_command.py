"""`manage.py connectors check` names what is wrong and where; `connectors list` prints the
catalog with every tool's promises (and, for a tenant, what it may use); `connectors enable`
and `disable` change which connectors a tenant reaches, audited, or refuse in one line."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from control.models import AuditEntry
from runs.models import ConnectorEnablement
from tests.factories import make_tenant

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


def enabled(tenant) -> dict[str, bool]:
    rows = ConnectorEnablement.objects.filter(tenant=tenant)
    return dict(rows.values_list("connector", "reads_without_approval"))


def connector_audit(tenant) -> list[tuple[str, str, dict]]:
    entries = AuditEntry.objects.filter(tenant=tenant, verb__startswith="connectors.")
    return list(entries.order_by("seq").values_list("verb", "actor", "data"))


def test_enable_and_disable_change_a_tenants_connectors_and_are_audited():
    tenant = make_tenant("acme", connectors=False)

    out, _ = run("enable", "--tenant", "acme", "ticket", "notify")
    assert out == "acme: enabled notify, ticket (read_only tools need approval)\n"
    out, _ = run("enable", "--tenant", "acme", "ticket", "--reads-without-approval")
    assert out == "acme: enabled ticket (read_only tools run at once)\n"
    assert enabled(tenant) == {"notify": False, "ticket": True}
    out, _ = run("enable", "--tenant", "acme", "ticket", "--reads-without-approval")
    assert out == "acme: nothing to enable\n"

    out, _ = run("disable", "--tenant", "acme", "--all")
    assert out == "acme: disabled notify, ticket\n"
    assert enabled(tenant) == {}
    assert connector_audit(tenant) == [
        (
            "connectors.enable",
            "manage.py connectors enable",
            {"connectors": ["notify", "ticket"], "reads_without_approval": False},
        ),
        (
            "connectors.enable",
            "manage.py connectors enable",
            {"connectors": ["ticket"], "reads_without_approval": True},
        ),
        (
            "connectors.disable",
            "manage.py connectors disable",
            {"connectors": ["notify", "ticket"]},
        ),
    ]


def test_enable_all_names_every_connector_and_dry_run_changes_nothing():
    tenant = make_tenant("acme", connectors=False)

    out, _ = run("enable", "--tenant", "acme", "--all", "--dry-run")
    assert out == "acme: would enable notify, payment, ticket (read_only tools need approval)\n"
    assert enabled(tenant) == {}
    assert connector_audit(tenant) == []
    run("enable", "--tenant", "acme", "--all")
    assert enabled(tenant) == {"notify": False, "payment": False, "ticket": False}
    out, _ = run("disable", "--tenant", "acme", "payment", "--dry-run")
    assert out == "acme: would disable payment\n"
    assert "payment" in enabled(tenant)


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (("enable", "--tenant", "nobody", "ticket"), "no tenant named 'nobody'"),
        (
            ("enable", "--tenant", "acme", "tickets"),
            "unknown connector 'tickets': this server has no tool of it "
            "(known: notify, payment, ticket)",
        ),
        (
            ("disable", "--tenant", "acme", "desk"),
            "unknown connector 'desk': this server has no tool of it and it is not enabled "
            "(known: notify, payment, ticket)",
        ),
        (("enable", "--tenant", "acme"), "name the connectors, or --all (not both)"),
        (("disable", "--tenant", "acme", "ticket", "--all"), "name the connectors, or --all"),
    ],
)
def test_a_refused_change_says_why_in_one_line_and_changes_nothing(arguments, reason):
    tenant = make_tenant("acme", connectors=False)
    with pytest.raises(CommandError) as refused:
        run(*arguments)
    assert str(refused.value).startswith(reason)
    assert "\n" not in str(refused.value)
    assert enabled(tenant) == {}
    assert connector_audit(tenant) == []


def test_list_for_a_tenant_says_which_tools_it_may_use():
    make_tenant("acme", connectors=False)
    run("enable", "--tenant", "acme", "ticket")

    out, _ = run("list", "--tenant", "acme")

    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert out.splitlines()[0].endswith("for acme")
    assert rows["ticket.lookup"].endswith("enabled, needs approval")
    assert rows["ticket.close"].endswith("enabled")
    assert rows["notify.send"].endswith("not enabled")
    with pytest.raises(CommandError, match="no tenant named 'nobody'"):
        run("list", "--tenant", "nobody")
