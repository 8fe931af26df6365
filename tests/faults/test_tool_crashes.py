"""A python tool that raises something other than a ToolError, with real worker processes
that load it from a python-kind connector file: every such exception is recorded on the
attempt, scrubbed; after a send it is an unknown outcome settled by key, a query that crashes
proves nothing (backed off, then a person), and nothing is left in flight with no word."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from reconciliation.models import ReconciliationCase
from reconciliation.probes import case_probe
from runs.models import Action
from runs.services.recovery import QUERY_ATTEMPTS
from tests.api.conftest import ApiClient, make_token
from tests.crashing import INTERNAL_URL, TOKEN
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.processes import wait_until
from tests.registry import connector_tools, registered

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

CRASHES = ["RuntimeError", "KeyError", "MemoryError"]


@pytest.fixture
def crashing_tool(tmp_path, monkeypatch):
    """Declares crashy.noop raising `raises` during `during` (comma-separated points), here
    and, through COUNTERSIGN_CONNECTORS, in the worker processes."""

    def declare(raises: str, during: str):
        text = (
            '[connectors.crashy]\nkind = "python"\n'
            '[connectors.crashy.tools.noop]\nclass = "tests.crashing.CrashingNoop"\n'
            f'options = {{ raises = "{raises}", during = "{during}", '
            'token = "${CRASHY_TOKEN}" }\n'
        )
        [tool] = connector_tools(tmp_path, text, environ={"CRASHY_TOKEN": TOKEN})
        monkeypatch.setenv("COUNTERSIGN_CONNECTORS", str(tmp_path / "connectors.toml"))
        monkeypatch.setenv("CRASHY_TOKEN", TOKEN)
        return stack.enter_context(registered(tool))

    with contextlib.ExitStack() as stack:
        yield declare


def _approved(tool) -> Action:
    tenant = make_tenant()
    action = make_action(make_run(tenant), tool=tool.name, target="noop-1", args={"n": 1})
    approve(action, make_user(tenant, "operator"))
    return action


def _pass(workers, action: Action) -> Action:
    call_command("sweep", verbosity=0)
    assert workers.run_burst() == 0
    action.refresh_from_db()
    return action


def _assert_scrubbed_crash(text: str, raises: str, point: str) -> None:
    assert f"crashy.noop raised {raises}: " in text, text
    assert point in text, text
    assert "10.1.2.3" not in text, text
    assert INTERNAL_URL not in text, text
    assert TOKEN not in text, text
    assert "Bearer ${CRASHY_TOKEN}" in text, text


@pytest.mark.parametrize("raises", CRASHES)
def test_a_send_that_crashes_is_an_unknown_outcome_settled_by_key(workers, crashing_tool, raises):
    action = _approved(crashing_tool(raises, during="execute"))

    wait_until(lambda: _pass(workers, action).status == "succeeded", timeout=30, interval=0.2)

    [attempt] = action.attempts.all()
    # The crash is on the attempt; the query by key found the effect the send made.
    assert (attempt.status, attempt.error_class) == ("settled_by_query", "tool_crashed")
    _assert_scrubbed_crash(attempt.error, raises, "execute")
    assert action.receipt.source == "query"
    assert list(
        action.run.events.filter(action=action).values_list("type", flat=True).order_by("seq")
    )[-2:] == ["attempt.uncertain", "action.succeeded"]


@pytest.mark.parametrize("raises", ["KeyError", "MemoryError"])
def test_a_query_that_crashes_backs_off_then_goes_to_a_person_never_resent(
    workers, crashing_tool, raises
):
    tool = crashing_tool(raises, during="execute,query,read")
    action = _approved(tool)
    api = ApiClient(make_token(action.run.tenant), action.run.tenant)

    before = timezone.now()
    _pass(workers, action)
    assert action.status == "in_flight"
    # The first failed query backs off (2 s, then 4, 8 ...), not the sweep's every pass.
    assert action.next_attempt_at >= before + timedelta(seconds=1.9)
    shown = api.get(f"/actions/{action.pk}").body
    assert shown["status"] == "in_flight"
    assert shown["error_class"] == "tool_crashed"
    _assert_scrubbed_crash(shown["last_error"], raises, "execute")

    for _ in range(QUERY_ATTEMPTS - 1):
        # The database's clock passes each pause (no test waits out 2 + 4 + ... seconds).
        Action.objects.filter(pk=action.pk).update(next_attempt_at=timezone.now())
        _pass(workers, action)
    assert action.status == "uncertain"

    assert action.attempts.count() == 1  # never sent again blind
    failures = action.run.events.filter(action=action, type="query.failed")
    assert failures.count() == QUERY_ATTEMPTS
    for detail in failures.values_list("payload__detail", flat=True):
        _assert_scrubbed_crash(detail, raises, "query")
    case = ReconciliationCase.objects.get(action=action)
    assert case.reason == "tool_crashed"
    shown = api.get(f"/actions/{action.pk}").body
    assert shown["reconciliation_case"]["id"] == str(case.pk)
    assert f"{QUERY_ATTEMPTS} queries by key proved nothing" in shown["last_error"]

    # A probe whose query and read crash records both as findings and keeps the case.
    # (Its first probe, due 0 s after it opened: probes 0 -> 1, so more probes follow.)
    ReconciliationCase.objects.filter(pk=case.pk).update(
        status="probing", probes=0, next_probe_at=timezone.now()
    )
    assert case_probe(case_pk=case.pk)
    case.refresh_from_db()
    [finding] = case.findings[-1:]
    _assert_scrubbed_crash(finding["query"], raises, "query")
    _assert_scrubbed_crash(finding["read"], raises, "read")
    assert (case.status, case.probes, case.resolution) == ("probing", 1, "")
    assert case.next_probe_at > timezone.now()
    assert Action.objects.get(pk=action.pk).status == "uncertain"
