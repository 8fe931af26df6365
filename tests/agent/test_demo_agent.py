"""The demo agent's three scenarios end to end: client over HTTP, real RQ workers, sandbox."""

from __future__ import annotations

import importlib.metadata
import io
import signal
import socket
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from reconciliation.models import ReconciliationCase
from reconciliation.services import case_resolve
from runs.models import Action, Plan, Run
from runs.services import plan_decide
from sandbox.models import Effect
from tests.factories import make_tenant, make_user
from tests.processes import leases_expire, wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


class AgentThread(threading.Thread):
    def __init__(self, url: str, scenario: str, *extra: str) -> None:
        super().__init__(daemon=True)
        self.command = [
            "demo_agent",
            "--scenario",
            scenario,
            "--url",
            url,
            "--tenant",
            "agents",
            "--timeout",
            "120",
            *extra,
        ]
        self.output = io.StringIO()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            call_command(*self.command, stdout=self.output)
        except BaseException as error:
            self.error = error
        finally:
            connection.close()

    def finish(self, timeout: float = 120) -> str:
        self.join(timeout)
        assert not self.is_alive(), f"the agent did not finish:\n{self.output.getvalue()}"
        assert self.error is None, f"{self.error}\n{self.output.getvalue()}"
        return self.output.getvalue()


@pytest.fixture
def tenant():
    return make_tenant("agents")


def waiting(action_id: str) -> Action:
    return wait_until(
        lambda: Action.objects.filter(action_id=action_id, status="waiting_approval").first(),
        timeout=30,
        message=f"{action_id} was never proposed",
    )


def approve_as(operator, action: Action) -> None:
    from runs.services import approval_decide

    action.run.refresh_from_db()
    approval_decide(
        action=action,
        approver=operator,
        decision="approve",
        seen_digest=action.intent_digest,
        seen_state_version=action.base_version,
    )


def test_ticket_scenario_closes_once_and_completes_with_the_receipt(tenant, workers, live_server):
    agent = AgentThread(live_server.url, "ticket")
    agent.start()
    close = waiting("close-ticket-7")
    approve_as(make_user(tenant, "operator"), close)
    assert workers.run_burst() == 0
    output = agent.finish()
    run = Run.objects.get(pk=close.run_id)
    assert run.phase == "completed"
    assert run.evidence["receipts"]["close-ticket-7"].startswith("tkc_")
    assert Effect.objects.filter(target="ticket-7").count() == 1
    assert "done: run completed" in output


def test_ticket_scenario_survives_a_kill_after_the_external_commit(tenant, workers, live_server):
    agent = AgentThread(live_server.url, "ticket")
    agent.start()
    close = waiting("close-ticket-7")
    approve_as(make_user(tenant, "operator"), close)
    assert workers.run_burst(fault_point="after_send_before_receipt") == -signal.SIGKILL
    assert Effect.objects.filter(target="ticket-7").count() == 1
    with connection.cursor() as cursor:  # the dead worker's lease runs out (database clock)
        cursor.execute("UPDATE runs_lease SET expires_at = now() - interval '1 second'")
    call_command("sweep", verbosity=0)
    assert workers.run_burst() == 0
    agent.finish()
    close.refresh_from_db()
    assert (close.status, close.receipt.source) == ("succeeded", "query")
    assert Effect.objects.filter(target="ticket-7").count() == 1
    assert Run.objects.get(pk=close.run_id).phase == "completed"


def approved_plan(operator) -> Plan:
    """The agent's plan, once proposed, approved with one decision in the inbox's terms."""
    plan = wait_until(lambda: Plan.objects.first(), timeout=30, message="no plan proposed")
    return plan_decide(
        plan=plan,
        approver=operator,
        decision="approve",
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
    )


def test_notifications_are_one_plan_and_an_uncertain_twentieth_holds_back_the_rest(
    tenant, workers, live_server
):
    reconciler = make_user(tenant, "reconciler")
    agent = AgentThread(live_server.url, "notifications", "--count", "25")
    agent.start()
    plan = approved_plan(make_user(tenant, "operator"))
    twentieth = Action.objects.get(plan=plan, action_id="notify-020")

    assert workers.run_burst(fault_point=f"after_send_before_receipt@{twentieth.pk}") == (
        -signal.SIGKILL
    )
    leases_expire(plan.run_id)
    call_command("sweep", verbosity=0)
    assert workers.run_burst() == 0
    twentieth.refresh_from_db()
    assert twentieth.status == "uncertain"
    case = wait_until(lambda: ReconciliationCase.objects.filter(action=twentieth).first())
    assert Effect.objects.filter(tool="notify.send").count() == 20, "#21 must wait"

    ReconciliationCase.objects.filter(pk=case.pk).update(status="open")  # probes exhausted
    case.refresh_from_db()
    case_resolve(
        case=case,
        user=reconciler,
        resolution="applied",
        note="the notifier lists it",
        evidence={"observed_state": "sent to customer-020 at 10:02"},
    )
    assert workers.run_burst() == 0
    output = agent.finish()
    assert "a plan of 25 notifications" in output
    assert Run.objects.get(pk=plan.run_id).phase == "completed"
    for number in range(1, 26):
        assert Effect.objects.filter(target=f"customer-{number:03d}@example.com").count() == 1


def test_cancelling_the_plan_reports_what_was_sent(tenant, workers, live_server):
    agent = AgentThread(live_server.url, "notifications", "--count", "6", "--cancel-after", "4")
    agent.start()
    plan = approved_plan(make_user(tenant, "operator"))
    fifth = Action.objects.get(plan=plan, action_id="notify-005")
    # The worker stops itself before sending #5: the agent sees four sent and cancels.
    worker = workers.start(fault_point=f"pause:before_send@{fifth.pk}")
    output = agent.finish()
    worker.kill()
    worker.wait(timeout=10)

    assert "cancelled: 4 sent, 0 in doubt, 2 not started" in output
    assert Effect.objects.filter(tool="notify.send").count() == 4
    assert Run.objects.get().phase == "cancelled"


def test_saga_scenario_refunds_the_charge_when_shipping_fails(tenant, workers, live_server):
    operator = make_user(tenant, "operator")
    agent = AgentThread(live_server.url, "saga", "--ship-fails")
    agent.start()
    worker = workers.start(burst=False)
    for step in ("charge", "ship", "undo-charge"):
        approve_as(operator, waiting(step))
    output = agent.finish()
    worker.send_signal(signal.SIGTERM)
    run = Run.objects.get()
    assert run.phase == "failed"
    assert run.stop_reason.endswith("(completed steps compensated)")
    assert sorted(Effect.objects.values_list("tool", flat=True)) == [
        "payment.charge",
        "payment.refund",
    ]
    assert "Countersign compensates" in output


def test_an_address_where_nothing_listens_is_said_as_such(tenant):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"

    with pytest.raises(CommandError) as refused:
        call_command(
            "demo_agent",
            "--scenario",
            "ticket",
            "--url",
            url,
            "--tenant",
            "agents",
            stdout=io.StringIO(),
        )

    assert str(refused.value).startswith(f"nothing is listening at {url}: start Countersign")


def test_the_server_declares_the_client_that_demo_agent_imports():
    # Installing the server without the client must fail at install, not at the first
    # `manage.py demo_agent`.
    required = importlib.metadata.requires("countersign") or []
    assert any(line.partition(";")[0].strip() == "countersign-client==0.1.0" for line in required)
    assert importlib.metadata.version("countersign-client") == "0.1.0"
