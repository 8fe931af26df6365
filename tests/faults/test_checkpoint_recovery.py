"""A run refused for a bad checkpoint has a way back: `recover_run` checks its events, and once
a person confirms, re-signs its state and reopens it; a worker then executes its next write."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from control.models import AuditEntry
from runs.models import Action, Checkpoint
from runs.record.checkpoints import latest_checkpoint
from runs.record.verification import run_verify
from sandbox.models import Effect
from tests.factories import approve, make_action, make_run, make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


def spoil_the_latest_checkpoint(run) -> None:
    """The body no longer matches its MAC (a bad restore, a stray edit)."""
    checkpoint = latest_checkpoint(run)
    envelope = json.loads(checkpoint.body)
    envelope["state"]["goal"] = "something else"
    Checkpoint.objects.filter(pk=checkpoint.pk).update(body=json.dumps(envelope))


def test_a_run_refused_for_its_checkpoint_recovers_after_a_person_confirms(workers, capsys):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    action = make_action(make_run(tenant), target="ticket-41")
    approve(action, operator)
    run = action.run
    spoil_the_latest_checkpoint(run)

    assert workers.run_burst() == 0
    run.refresh_from_db()
    action.refresh_from_db()
    assert run.phase == "failed"
    assert run.stop_reason.startswith("checkpoint refused at mac")
    assert action.status == "cancelled"
    assert not Effect.objects.filter(target="ticket-41").exists()

    call_command("recover_run", str(run.pk))  # without --confirm: says what it would do
    assert "Run again with --confirm" in capsys.readouterr().out
    run.refresh_from_db()
    assert run.phase == "failed"

    call_command("recover_run", str(run.pk), confirm="ops: restored row checked, events verified")

    run.refresh_from_db()
    assert (run.phase, run.stop_reason) == ("running", "")
    assert run_verify(run) == []
    entry = AuditEntry.objects.get(verb="run.recover", object_id=str(run.pk))
    assert entry.reason == "ops: restored row checked, events verified"
    again = make_action(run, action_id="close-ticket-again", target="ticket-41")
    approve(again, operator)
    assert workers.run_burst() == 0
    again.refresh_from_db()
    assert again.status == "succeeded"
    assert Effect.objects.filter(target="ticket-41").count() == 1
    assert Action.objects.get(pk=action.pk).status == "cancelled"  # not resurrected


def test_recovery_refuses_a_run_that_was_not_stopped_for_its_checkpoint():
    run = make_run(make_tenant())
    with pytest.raises(CommandError, match="nothing to recover"):
        call_command("recover_run", str(run.pk))
    with pytest.raises(CommandError, match="only a run stopped because its checkpoint"):
        call_command("recover_run", str(run.pk), confirm="why not")
