"""An MCP session's run ends once nobody calls it for COUNTERSIGN_MCP_IDLE_SECONDS: the sweep
completes it with the receipts of what it executed, or cancels it as idle when it executed
nothing; a run holding an open write is never ended under it, and any call keeps it alive."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

from runs.execution.sweep import sweep_once
from runs.models import Action, Run
from runs.record.verification import run_verify
from tests.api.support import execute_with_receipt
from tests.factories import approve, make_user
from tests.gateway.conftest import call

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def idle_seconds(settings) -> int:
    settings.COUNTERSIGN_MCP_IDLE_SECONDS = 600
    return 600


def _last_event(run: Run):
    return run.events.order_by("-seq").first()


def test_a_run_that_only_read_is_cancelled_as_idle_and_the_next_call_starts_another(
    caller, read_tool, redis_queue, idle_seconds
):
    with time_machine.travel(START, tick=False) as clock:
        first = call(caller, "bench.read", {"target": "status-page"}).structured_content
        run = Run.objects.get(pk=first["run_id"])
        clock.shift(idle_seconds - 1)
        assert sweep_once().idled == 0
        run.refresh_from_db()
        assert run.phase == "running"

        clock.shift(2)
        assert sweep_once().idled == 1
        run.refresh_from_db()
        assert (run.phase, run.stop_reason) == ("cancelled", "idle: no MCP call for 600 s")
        event = _last_event(run)
        assert (event.type, event.actor) == ("run.cancelled", "countersign")
        assert run_verify(run) == []
        assert sweep_once().idled == 0

        second = call(caller, "bench.read", {"target": "status-page"}).structured_content
    assert second["run_id"] != first["run_id"]


def test_a_run_that_executed_a_write_completes_with_its_receipt_as_evidence(
    caller, counted_write, redis_queue, idle_seconds
):
    with time_machine.travel(START, tick=False) as clock:
        envelope = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 1}})
        action = Action.objects.get(pk=envelope.structured_content["action_id"])
        approve(action, make_user(caller.token.tenant, "operator"))
        execute_with_receipt(action, receipt_id="rcpt-deploy-7")
        clock.shift(idle_seconds + 1)

        assert sweep_once().idled == 1
        run = Run.objects.get(pk=action.run_id)
        assert (run.phase, run.stop_reason) == ("completed", "idle: no MCP call for 600 s")
        assert run.evidence["receipts"] == {action.action_id: "rcpt-deploy-7"}
        assert _last_event(run).type == "run.completed"
        assert run_verify(run) == []

        # The agent comes back: the same write is still the same intent, in its ended run.
        again = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 1}})
    assert again.structured_content["action_id"] == str(action.pk)
    assert again.structured_content["receipt"]["receipt_id"] == "rcpt-deploy-7"
    assert Action.objects.count() == 1


def test_a_run_holding_an_open_write_is_never_ended_as_idle(
    caller, counted_write, redis_queue, idle_seconds
):
    with time_machine.travel(START, tick=False) as clock:
        envelope = call(caller, "counted.write", {"target": "deploy-7", "args": {"n": 1}})
        clock.shift(idle_seconds * 10)
        assert sweep_once().idled == 0
    action = Action.objects.get(pk=envelope.structured_content["action_id"])
    assert action.status == "waiting_approval"
    assert action.run.phase == "waiting_approval"


def test_any_call_of_its_session_keeps_a_run_alive(caller, read_tool, redis_queue, idle_seconds):
    with time_machine.travel(START, tick=False) as clock:
        run_id = call(caller, "bench.read", {"target": "status-page"}).structured_content["run_id"]
        clock.shift(idle_seconds - 60)
        refused = call(caller, "countersign_status", {"action_id": "not-an-action"})
        assert refused.is_error
        clock.shift(120)  # past the idle time since the read, not since the last call
        assert sweep_once().idled == 0
        assert Run.objects.get(pk=run_id).phase == "running"
        clock.shift(idle_seconds)
        assert sweep_once().idled == 1
