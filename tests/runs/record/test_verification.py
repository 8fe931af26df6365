"""verify_run: the event chain, replay against stored state, and the latest checkpoint."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from runs.models import Receipt, Run, RunEvent
from runs.record.events import event_hash, replay, run_state
from runs.record.verification import run_verify
from tests.api.support import execute_with_receipt
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.tampering import as_database_owner, sql_params

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    action.run.refresh_from_db()
    return action.run


def test_replaying_the_events_gives_the_stored_state(run):
    assert replay(run.events.order_by("seq")) == run_state(run)


def test_an_intact_run_verifies(run, capsys):
    call_command("verify_run", str(run.pk))
    assert "verified" in capsys.readouterr().out


def _execute(sql: str, params: list) -> None:
    with as_database_owner(), connection.cursor() as cursor:
        cursor.execute(sql, sql_params(params))


def test_an_edited_event_is_detected(run):
    _execute(
        "UPDATE runs_runevent SET payload = %s WHERE run_id = %s AND seq = 2",
        ['{"forged": true}', run.pk],
    )
    with pytest.raises(CommandError, match="event #2 was altered"):
        call_command("verify_run", str(run.pk))


def test_a_deleted_event_is_detected(run):
    _execute("DELETE FROM runs_runevent WHERE run_id = %s AND seq = 2", [run.pk])
    with pytest.raises(CommandError, match="event #2 is missing"):
        call_command("verify_run", str(run.pk))


def test_reordered_events_are_detected(run):
    _execute(
        "UPDATE runs_runevent SET seq = seq + 1000 WHERE run_id = %s AND seq IN (2, 3)", [run.pk]
    )
    _execute("UPDATE runs_runevent SET seq = 3 WHERE run_id = %s AND seq = 1002", [run.pk])
    _execute("UPDATE runs_runevent SET seq = 2 WHERE run_id = %s AND seq = 1003", [run.pk])
    with pytest.raises(CommandError, match="does not link"):
        call_command("verify_run", str(run.pk))


def test_a_stored_field_that_replay_does_not_give_is_detected(run):
    _execute("UPDATE runs_run SET phase = 'completed', evidence = '{}' WHERE id = %s", [run.pk])
    with pytest.raises(CommandError, match="replay gives phase"):
        call_command("verify_run", str(run.pk))


def test_an_unknown_run_is_refused_with_a_reason():
    with pytest.raises(CommandError, match="no run"):
        call_command("verify_run", "not-a-uuid")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE runs_runevent SET payload = '{}' WHERE run_id = %s",
        "DELETE FROM runs_runevent WHERE run_id = %s",
        "UPDATE runs_receipt SET receipt_id = 'forged' WHERE action_id IN "
        "(SELECT id FROM runs_action WHERE run_id = %s)",
        "DELETE FROM runs_receipt WHERE action_id IN "
        "(SELECT id FROM runs_action WHERE run_id = %s)",
    ],
)
def test_events_and_receipts_refuse_updates_and_deletes_in_the_database(run, statement):
    execute_with_receipt(run.actions.get())
    assert Receipt.objects.filter(action__run=run).exists()
    before = list(RunEvent.objects.filter(run=run).values_list("seq", "hash"))

    with pytest.raises(DatabaseError, match="insert-only"), transaction.atomic():
        _execute_as_application(statement, [run.pk])

    after = list(RunEvent.objects.filter(run=run).values_list("seq", "hash"))
    assert after[: len(before)] == before
    assert Receipt.objects.filter(action__run=run).values_list("receipt_id", flat=True).get() != (
        "forged"
    )


def test_the_orm_cannot_update_or_delete_events_either(run):
    with pytest.raises(DatabaseError, match="insert-only"), transaction.atomic():
        RunEvent.objects.filter(run=run).update(actor="someone else")
    with pytest.raises(DatabaseError, match="insert-only"), transaction.atomic():
        RunEvent.objects.filter(run=run).delete()
    assert RunEvent.objects.filter(run=run).exclude(actor="someone else").count() == (
        run.state_version
    )


def _execute_as_application(sql: str, params: list) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, sql_params(params))


def test_events_rewritten_with_every_plain_hash_recomputed_are_caught_by_the_signed_head(run):
    """The attacker edits event #2, recomputes its hash and every later one, and points the
    run at the new head: the chain is internally consistent, the signed checkpoint is not."""
    with as_database_owner():
        prev_hash = RunEvent.objects.get(run=run, seq=1).hash
        for event in RunEvent.objects.filter(run=run, seq__gte=2).order_by("seq"):
            if event.seq == 2:
                event.payload = {**event.payload, "forged": True}
            event.prev_hash = prev_hash
            event.hash = event_hash(prev_hash=prev_hash, event=event)
            event.save(update_fields=["payload", "prev_hash", "hash"])
            prev_hash = event.hash
        Run.objects.filter(pk=run.pk).update(event_head_hash=prev_hash)
    run.refresh_from_db()

    problems = run_verify(run)

    assert [p for p in problems if "was altered" in p or "does not link" in p] == []
    assert any("events were rewritten" in problem for problem in problems)


def test_a_receipt_edited_by_the_database_owner_breaks_the_completed_digest(run):
    execute_with_receipt(run.actions.get(), receipt_id="rcpt-genuine")
    run.refresh_from_db()
    assert run_verify(run) == []
    _execute(
        "UPDATE runs_receipt SET receipt_id = 'rcpt-forged' WHERE action_id IN "
        "(SELECT id FROM runs_action WHERE run_id = %s)",
        [run.pk],
    )

    problems = run_verify(run)

    assert any("the receipts chain to 1 completed" in problem for problem in problems)


def test_completed_work_rewritten_on_the_run_row_is_caught_by_the_signed_checkpoint(run):
    execute_with_receipt(run.actions.get())
    Run.objects.filter(pk=run.pk).update(completed_count=0, completed_digest="sha256:" + "0" * 64)
    run.refresh_from_db()

    problems = run_verify(run)

    assert any("signed checkpoint names completed work" in problem for problem in problems)
    assert any("the receipts chain to 1 completed" in problem for problem in problems)
