"""`requires_approval` end to end: a live server, an operator's decision, a real RQ worker
executing against the sandbox over HTTP, and the sweep."""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from django.core.management import call_command

from control.foundation.clock import db_now
from reconciliation.models import ReconciliationCase
from runs.models import Action, Run
from runs.models import Observation as SeenRecord
from runs.models import Plan as PlanRecord
from runs.services import action_edit_and_approve, plan_decide
from sandbox.models import Effect
from tests.client.conftest import CLIENT_DIR, LIVE
from tests.factories import approve, make_policy, make_user, reject
from tests.processes import wait_until
from tests.sandbox.support import set_fault

from countersign_client import (  # isort: skip
    Countersign,
    Expired,
    Intent,
    Observation,
    Plan,
    Rejected,
    Uncertain,
    requires_approval,
    requires_plan_approval,
)

pytestmark = LIVE
README = Path(CLIENT_DIR) / "README.md"


@pytest.fixture
def agent():
    """Runs the agent's blocking call in a thread while the test plays operator and worker."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


def _waiting_action(**filters) -> Action:
    return wait_until(
        lambda: Action.objects.filter(status="waiting_approval", **filters).first(),
        timeout=20,
        message="the agent never proposed its intent",
    )


def _execute(workers, action: Action) -> None:
    """A burst worker runs the approved action. Redis is only delivery: when its job went
    missing (Redis db 15 is shared with any other test run on this machine), the sweep
    re-drives the action from PostgreSQL, as it would in production."""
    for _ in range(5):
        assert workers.run_burst() == 0
        action.refresh_from_db()
        if action.status not in ("approved", "retry_wait", "in_flight"):
            return
        call_command("sweep", verbosity=0)
    raise AssertionError(f"action {action.action_id} is still {action.status}")


def _close_ticket(cs: Countersign, run_id: str):
    @requires_approval(cs, run_id=run_id, tool="ticket.close", timeout=60)
    def close_ticket(ticket_id: str) -> Intent:
        return Intent(
            action_id=f"close-{ticket_id}",
            target=ticket_id,
            args={"resolution": "fixed"},
            observation=Observation(
                source="ticket.lookup",
                ref=ticket_id,
                content='{"status": "open", "comment": "works now"}',
                summary="the customer confirmed the fix",
            ),
        )

    return close_ticket


def test_the_readme_agent_gets_a_real_receipt_from_a_worker(
    live_server, token, tenant, workers, agent
):
    snippet = re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL).group(1)
    snippet = snippet.replace("http://localhost:8000", live_server.url).replace("cs_...", token)
    namespace: dict = {}
    running: Future = agent.submit(exec, snippet, namespace)
    action = _waiting_action(target="ticket-7")
    assert action.observation.summary == "the customer confirmed the fix"
    approve(action, make_user(tenant, "operator"))
    _execute(workers, action)
    running.result(timeout=60)
    receipt = namespace["receipt"]
    assert receipt["status"] == "closed"
    assert receipt["idempotency_key"] == action.idempotency_key
    assert receipt["intent_digest"] == action.intent_digest
    assert Effect.objects.filter(idempotency_key=action.idempotency_key).count() == 1
    run = Run.objects.get()
    assert run.phase == "completed"
    assert run.evidence["receipts"] == {"close-ticket-7": receipt["receipt_id"]}


def test_a_rejection_raises_rejected_with_the_operators_reason(cs, tenant, agent):
    run = cs.create_run("close ticket-8")
    running = agent.submit(_close_ticket(cs, run["id"]), "ticket-8")
    action = _waiting_action()
    reject(action, make_user(tenant, "operator"), reason="the customer reopened it this morning")
    with pytest.raises(Rejected) as rejected:
        running.result(timeout=30)
    assert rejected.value.reason == "the customer reopened it this morning"
    assert rejected.value.action["status"] == "rejected"
    assert not Effect.objects.exists()


def test_an_unanswered_request_raises_expired_after_the_sweep(cs, tenant, agent, redis_queue):
    make_policy(tenant, "ticket.close", approval_seconds=1)
    run = cs.create_run("close ticket-9")
    running = agent.submit(_close_ticket(cs, run["id"]), "ticket-9")
    action = _waiting_action()
    wait_until(
        lambda: Action.objects.filter(pk=action.pk, expires_at__lt=db_now()).exists(),
        timeout=10,
        message="the request never expired",
    )
    call_command("sweep", verbosity=0)
    with pytest.raises(Expired) as expired:
        running.result(timeout=30)
    assert expired.value.action["status"] == "expired"
    assert not Effect.objects.exists()


def test_an_outcome_nobody_can_prove_raises_uncertain_with_the_case_link(
    cs, tenant, workers, sandbox, agent
):
    set_fault(sandbox, tool="notify.send", fault="commit_then_drop")
    run = cs.create_run("tell ops the ticket is closed")

    @requires_approval(cs, run_id=run["id"], tool="notify.send", timeout=60)
    def notify(recipient: str) -> Intent:
        return Intent(
            action_id="notify-ops",
            target=recipient,
            args={"body": "ticket-7 is closed"},
            observation=Observation(
                source="ticket.lookup", ref="ticket-7", content="closed", summary="it is closed"
            ),
        )

    running = agent.submit(notify, "ops@example.com")
    action = _waiting_action()
    approve(action, make_user(tenant, "operator"))
    _execute(workers, action)
    call_command("sweep", verbosity=0)  # opens the case, should its job have gone missing
    with pytest.raises(Uncertain) as uncertain:
        running.result(timeout=60)
    case = ReconciliationCase.objects.get()
    assert uncertain.value.case_id == str(case.id)
    assert (
        uncertain.value.case_url
        == f"{cs.api_url.removesuffix('/api/v1')}/reconciliation/{case.id}/"
    )
    assert uncertain.value.action["status"] == "uncertain"
    # The notifier did send it once: exactly why nobody may send it again blindly.
    assert Effect.objects.filter(tool="notify.send").count() == 1


def test_an_operators_edit_returns_the_receipt_of_the_edited_intent(cs, tenant, workers, agent):
    run = cs.create_run("close ticket-11")
    running = agent.submit(_close_ticket(cs, run["id"]), "ticket-11")
    action = _waiting_action()
    edited = action_edit_and_approve(
        action=action,
        editor=make_user(tenant, "operator"),
        args={"resolution": "duplicate of ticket-3"},
        seen_digest=action.intent_digest,
        seen_state_version=action.base_version,
        reason="it is a duplicate",
    )
    _execute(workers, edited)
    receipt = running.result(timeout=60)
    assert receipt["intent_digest"] == edited.intent_digest != action.intent_digest
    assert Effect.objects.filter(idempotency_key=edited.idempotency_key).count() == 1


def _tell_customers(cs: Countersign, run_id: str):
    @requires_plan_approval(cs, run_id=run_id, tool="notify.send", timeout=60)
    def tell(customers: list[str]) -> Plan:
        return Plan(
            [
                Intent(f"tell-{name}", f"{name}@example.com", {"body": "your order shipped"})
                for name in customers
            ],
            observation=Observation(
                source="orders",
                ref="shipped-today",
                content="\n".join(customers),
                summary="shipped",
            ),
        )

    return tell


def _decide_plan(tenant, decision: str = "approve", reason: str = "") -> PlanRecord:
    plan = wait_until(
        lambda: PlanRecord.objects.filter(status="waiting_approval").first(),
        timeout=20,
        message="the agent never proposed its plan",
    )
    return plan_decide(
        plan=plan,
        approver=make_user(tenant, "operator"),
        decision=decision,
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
        reason=reason,
    )


def test_the_readme_plan_returns_every_receipt_in_order_after_one_approval(
    cs, tenant, workers, agent
):
    section = README.read_text().split("### Approve the plan once", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    run = cs.create_run("tell two customers their order shipped")
    seen = Observation("orders", "shipped-today", "ada and bob", content="ada\nbob")
    namespace = {"cs": cs, "run": run, "seen": seen, "Intent": Intent, "Observation": Observation}
    running = agent.submit(exec, snippet, namespace)
    plan = _decide_plan(tenant)
    for item in plan.items.order_by("position"):
        _execute(workers, item)
    running.result(timeout=60)

    receipts = namespace["receipts"]
    items = list(plan.items.order_by("position"))
    assert [r["receipt_id"] for r in receipts] == [a.receipt.receipt_id for a in items]
    assert [r["intent_digest"] for r in receipts] == [a.intent_digest for a in items]
    assert [e.target for e in Effect.objects.order_by("id")] == [
        "ada@example.com",
        "bob@example.com",
    ]
    # A restarted agent calling again gets the same receipts: no second plan, observation
    # or send.
    again = agent.submit(namespace["tell"], ["ada", "bob"], seen).result(timeout=30)
    assert again == receipts
    assert PlanRecord.objects.count() == 1
    assert SeenRecord.objects.filter(run_id=run["id"]).count() == 1
    assert Effect.objects.count() == 2


def test_a_rejected_plan_raises_rejected_and_sends_nothing(cs, tenant, agent):
    run = cs.create_run("tell two customers")
    running = agent.submit(_tell_customers(cs, run["id"]), ["dee", "eve"])
    _decide_plan(tenant, "reject", reason="the shipment was recalled")
    with pytest.raises(Rejected) as rejected:
        running.result(timeout=30)
    assert rejected.value.reason == "the shipment was recalled"
    assert not Effect.objects.exists()
