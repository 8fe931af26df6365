"""The crash matrix's fifth window: a worker SIGKILLed in the middle of a batch.

Each round approves five ticket closes (the sandbox's desk dedupes and can be queried by
key, so their attempts begin in one transaction) and one notification (the notifier does
neither: it never joins a batch, so a crash can leave at most one send of it in doubt).
The worker dies right after the third close of its batch reached the desk: its whole batch
is in flight, some sent and unrecorded, the rest begun and never sent. The sweep and a
fresh worker must settle every one by key: each ticket closed exactly once, no case for a
person, and the notification sent once. COUNTERSIGN_CRASH_RUNS / 4 rounds (at least 2).
"""

from __future__ import annotations

import os
import signal

import pytest
from django.core.management import call_command

from reconciliation.models import ReconciliationCase
from runs.models import Action, Attempt, Run
from runs.record.verification import run_verify
from sandbox.models import Effect, Ticket
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.faults.test_crash_matrix import REPORT, _clock_passes_lease_expiry

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])
ROUNDS = max(2, int(os.environ.get("COUNTERSIGN_CRASH_RUNS", "20")) // 4)
CLOSES = 5


def _round(number: int, tenant, operator) -> tuple[list[Action], Action]:
    closes = []
    for index in range(CLOSES):
        ticket = f"ticket-{1000 + number * 10 + index}"
        Ticket.objects.create(id=ticket)
        action = make_action(make_run(tenant), target=ticket, action_id=f"close-{number}-{index}")
        approve(action, operator)
        closes.append(action)
    notice = make_action(
        make_run(tenant),
        tool="notify.send",
        target=f"user-{number}@example.com",
        args={"body": f"Round {number} is done."},
        action_id=f"notify-{number}",
    )
    approve(notice, operator)
    return closes, notice


def _effects(action: Action) -> int:
    return Effect.objects.filter(tool=action.tool, target=action.target).count()


def test_a_worker_killed_mid_batch_leaves_every_write_settled_by_key_once(workers, sandbox):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    closes, notices = [], []
    for number in range(ROUNDS):
        batch, notice = _round(number, tenant, operator)
        # The claim takes them oldest first: the third close is the third call of the batch.
        killed_at = batch[2]
        assert workers.run_burst(fault_point=f"after_send_before_receipt@{killed_at.pk}") == (
            -signal.SIGKILL
        )
        in_flight = Action.objects.filter(pk__in=[a.pk for a in batch], status="in_flight")
        assert in_flight.count() == CLOSES, "the whole batch was begun before the first call"
        sending = Attempt.objects.filter(action__in=batch, status="sending")
        assert sending.values("started_at").distinct().count() == 1
        assert sum(_effects(a) for a in batch) == 3
        assert Action.objects.get(pk=notice.pk).status == "succeeded"
        closes += batch
        notices.append(notice)

    _clock_passes_lease_expiry(closes)
    for _ in range(3):
        call_command("sweep", verbosity=0)
        assert workers.run_burst() == 0
        if not Action.objects.filter(pk__in=[a.pk for a in closes]).exclude(status="succeeded"):
            break
        _clock_passes_lease_expiry(closes)

    effects = [_effects(action) for action in closes + notices]
    statuses = {a.status for a in Action.objects.filter(pk__in=[a.pk for a in closes + notices])}
    cases = ReconciliationCase.objects.filter(action__in=closes + notices).count()
    REPORT.parent.mkdir(exist_ok=True)
    with REPORT.open("a") as report:
        report.write(
            f"{'killed_mid_batch':24} {'ticket.close':13} runs={len(closes)} kills={ROUNDS} "
            f"effects={sum(effects)} duplicates={sum(e - 1 for e in effects if e > 1)} "
            f"cases={cases} statuses={sorted(statuses)}\n"
        )
    assert effects == [1] * len(effects), "every write exactly once, none lost, none twice"
    assert statuses == {"succeeded"}
    assert cases == 0
    settled_by_query = Attempt.objects.filter(action__in=closes, status="settled_by_query")
    assert settled_by_query.count() >= 3 * ROUNDS  # sent before the kill: found by key
    for run in Run.objects.filter(actions__in=closes):
        assert run_verify(run) == []
