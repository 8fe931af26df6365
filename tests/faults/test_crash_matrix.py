"""The four crash windows x an idempotent and a non-idempotent tool, with real SIGKILLs.

Each cell crashes COUNTERSIGN_CRASH_RUNS (default 20) seeded runs: a worker process dies at
the window's point (a fault point, or kill -9 while the sandbox hangs on the request), then
the sweep and a fresh worker take over. The verdict comes from the sandbox's own effects
ledger, the ground truth of what happened outside.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from django.core.management import call_command
from django.db import connection

from reconciliation.models import ReconciliationCase
from runs.models import Action, Attempt
from sandbox.models import Effect, FaultPlan, Ticket
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
RUNS = int(os.environ.get("COUNTERSIGN_CRASH_RUNS", "20"))
# How long the sandbox holds a call in the sent_result_unknown window before it makes the
# change: the kill comes 0.05-0.4 s into it, with room to spare on a busy machine.
HANG_SECONDS = 3
REPORT = Path(__file__).resolve().parents[2] / "test-artifacts" / "crash-matrix.txt"


@dataclass(frozen=True)
class ToolCase:
    tool: str
    idempotent: bool

    def target(self, number: int) -> str:
        return f"ticket-{number}" if self.tool == "ticket.close" else f"user-{number}@example.com"

    def args(self, number: int) -> dict:
        if self.tool == "ticket.close":
            return {"resolution": "fixed"}
        return {"body": f"Your order {number} has shipped."}

    def effects(self, action: Action) -> int:
        return Effect.objects.filter(tool=self.tool, target=action.target).count()


TOOLS = [ToolCase("ticket.close", idempotent=True), ToolCase("notify.send", idempotent=False)]
WINDOWS = ["before_call", "sent_result_unknown", "committed_not_recorded", "recorded"]


def _clock_passes_lease_expiry(actions: list[Action]) -> None:
    """Advances the database clock for these leases: the dead worker's lease runs out."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_lease SET expires_at = now() - interval '1 second' WHERE run_id = ANY(%s)",
            [[str(action.run_id) for action in actions]],
        )


def _crash(window: str, action: Action, workers, sandbox: str, rng: random.Random) -> None:
    if window == "sent_result_unknown":
        requests.post(
            sandbox + "faults",
            timeout=5,
            json={
                "tool": action.tool,
                "fault": f"hang_before_commit:{HANG_SECONDS}",
                "count": 1,
            },
        ).raise_for_status()
        process = workers.start()
        # The request is inside the sandbox once it took its fault (committed before the hang).
        wait_until(
            lambda: not FaultPlan.objects.filter(tool=action.tool, remaining__gt=0).exists(),
            message="the request never reached the sandbox",
        )
        assert Attempt.objects.filter(action=action, status="sending").exists()
        time.sleep(rng.uniform(0.05, 0.4))
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        # The kill landed mid-call: the sandbox had not yet made the change, and the worker
        # had recorded no answer.
        effects = Effect.objects.filter(tool=action.tool, target=action.target)
        assert not effects.exists(), "the call had finished before the worker was killed"
        assert Attempt.objects.filter(action=action, status="sending").exists()
        return
    point = {
        "before_call": "before_send",
        "committed_not_recorded": "after_send_before_receipt",
        "recorded": "after_receipt",
    }[window]
    # Scoped to this action: a recovered orphan of an earlier run passes the point unharmed.
    code = workers.run_burst(fault_point=f"{point}@{action.pk}")
    if code != -signal.SIGKILL:
        action.refresh_from_db()
        attempts = Attempt.objects.filter(action=action)
        said = list(attempts.values_list("status", "error_class", "error"))
        raise AssertionError(
            f"the worker exited {code} without reaching {point} for {action.target}: the action"
            f" is {action.status}, its attempts {said}; the worker said:\n{workers.last_output}"
        )


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("tool", TOOLS, ids=lambda case: case.tool)
def test_crash_window(tool: ToolCase, window: str, workers, sandbox):
    rng = random.Random(f"{tool.tool}/{window}")
    # Every dead worker's lease is run out by _clock_passes_lease_expiry, never by waiting: a
    # long lease keeps a live worker stalled on a busy machine from losing its own mid-call
    # (its action would then wait out a retry, and the burst exit without reaching the point).
    workers.lease_seconds = 60
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    actions = []
    # Each run has a target of its own: beyond the sandbox's 100 tickets, open more.
    Ticket.objects.bulk_create(Ticket(id=f"ticket-{number}") for number in range(101, RUNS + 1))
    for number in rng.sample(range(1, max(RUNS, 100) + 1), RUNS):
        action = make_action(
            make_run(tenant),
            tool=tool.tool,
            target=tool.target(number),
            args=tool.args(number),
            action_id=f"step-{number}",
        )
        approve(action, operator)
        _crash(window, action, workers, sandbox, rng)
        actions.append(action)
    # Recovery: the dead workers' leases run out, the sweep re-drives, a fresh worker runs.
    _clock_passes_lease_expiry(actions)
    for _ in range(5):
        call_command("sweep", verbosity=0)
        assert workers.run_burst() == 0
        call_command("sweep", verbosity=0)
        pending = Action.objects.filter(
            pk__in=[a.pk for a in actions], status__in=["approved", "retry_wait", "in_flight"]
        )
        if not pending.exists():
            break
        _clock_passes_lease_expiry(actions)
    wait_until(
        lambda: all(tool.effects(a) >= 1 for a in actions) or window == "before_call",
        timeout=10,
        message="a hanging sandbox request never committed",
    )

    effects = [tool.effects(action) for action in actions]
    statuses = {a.status for a in Action.objects.filter(pk__in=[a.pk for a in actions])}
    cases = ReconciliationCase.objects.filter(action__in=actions).exclude(status="resolved").count()
    REPORT.parent.mkdir(exist_ok=True)
    with REPORT.open("a") as report:
        report.write(
            f"{window:24} {tool.tool:13} runs={RUNS} effects={sum(effects)} "
            f"duplicates={sum(e - 1 for e in effects if e > 1)} cases={cases} "
            f"statuses={sorted(statuses)}\n"
        )

    assert max(effects) == 1, "an intent had more than one effect"
    if tool.idempotent or window in ("before_call", "recorded"):
        assert effects == [1] * RUNS
        assert statuses == {"succeeded"}
        assert cases == 0
    else:
        assert effects == [1] * RUNS, "the notifier must show the one send, never a resend"
        assert statuses == {"uncertain"}
        assert cases == RUNS
