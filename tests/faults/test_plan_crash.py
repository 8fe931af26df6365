"""The seeds' exercise as one plan, with real processes: 100 notifications, one approval, the
worker SIGKILLed right after the notifier committed #20. The notifier ends with exactly 100
messages, none twice: #20 is settled in the reconciliation queue, and #21 to #100 are sent
only after it."""

from __future__ import annotations

import signal

import pytest
from django.core.management import call_command

from reconciliation.models import ReconciliationCase
from reconciliation.services import case_resolve
from runs.models import Action
from runs.record.verification import run_verify
from runs.services import PlanItem, plan_decide, plan_propose
from sandbox.models import Effect
from tests.factories import make_observation, make_run, make_tenant, make_user
from tests.processes import leases_expire
from tests.reconciliation.test_cases import probe_until_settled

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])

COUNT = 100


def sent() -> list[str]:
    return list(Effect.objects.filter(tool="notify.send").values_list("target", flat=True))


def test_a_plan_of_100_notifications_survives_a_kill_after_the_20th_send(workers):
    tenant = make_tenant()
    run = make_run(tenant, goal="tell every customer the outage is over")
    plan, _ = plan_propose(
        run=run,
        items=[
            PlanItem(
                f"notify-{n}",
                "notify.send",
                f"customer-{n}@example.com",
                {"body": "The outage is over."},
            )
            for n in range(1, COUNT + 1)
        ],
        observation=make_observation(run, summary="the outage list, 100 customers"),
        proposed_by="agent-token",
    )
    plan_decide(
        plan=plan,
        approver=make_user(tenant, "operator"),
        decision="approve",
        seen_digest=plan.digest,
        seen_state_version=plan.base_version,
    )
    items = list(plan.items.order_by("position"))
    twentieth = items[19]

    killed = workers.run_burst(fault_point=f"after_send_before_receipt@{twentieth.pk}")

    assert killed == -signal.SIGKILL
    assert sent() == [f"customer-{n}@example.com" for n in range(1, 21)]
    leases_expire(run.pk)
    call_command("sweep", verbosity=0)
    assert workers.run_burst() == 0
    twentieth.refresh_from_db()
    assert twentieth.status == "uncertain"
    assert len(sent()) == 20  # fail closed: #21 onwards wait for #20's case

    case = probe_until_settled(ReconciliationCase.objects.get(action=twentieth))
    assert case.status == "open"
    proof = Effect.objects.get(tool="notify.send", target="customer-20@example.com")
    case_resolve(
        case=case,
        user=make_user(tenant, "reconciler"),
        resolution="applied",
        note="the notifier lists it",
        evidence={"receipt_id": proof.receipt_id, "intent_digest": twentieth.intent_digest},
    )
    assert workers.run_burst() == 0

    assert sorted(sent()) == sorted(f"customer-{n}@example.com" for n in range(1, COUNT + 1))
    assert len(sent()) == len(set(sent())) == COUNT
    assert set(Action.objects.filter(plan=plan).values_list("status", flat=True)) == {"succeeded"}
    twentieth.refresh_from_db()
    assert twentieth.receipt.source == "reconciler"
    case.refresh_from_db()
    later = Effect.objects.filter(target__in=[f"customer-{n}@example.com" for n in range(21, 101)])
    assert min(e.created_at for e in later) > case.resolved_at  # only once #20 was settled
    run.refresh_from_db()
    assert run.phase == "running"
    assert run_verify(run) == []
