"""export_checkpoint and import_checkpoint: verified out, verified and restored in."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from control.models import AuditEntry
from runs.models import Action, Run
from runs.record.verification import run_verify
from runs.services import PlanItem, lease_claim, plan_propose, protocol
from tests.api.support import execute_with_receipt
from tests.factories import (
    approve,
    approve_plan,
    make_action,
    make_observation,
    make_run,
    make_tenant,
    make_user,
)
from tests.tampering import as_database_owner, sql_params

pytestmark = pytest.mark.django_db


def _export(run, tmp_path):
    path = tmp_path / "checkpoint.json"
    call_command("export_checkpoint", str(run.pk), "-o", str(path), verbosity=0)
    return path


def _forget(run: Run) -> None:
    """Simulates moving to another installation: the run is not in this database."""
    for model in (
        "runs_checkpoint",
        "runs_runevent",
        "runs_approval",
        "runs_receipt",
        "runs_statement",
        "runs_attempt",
        "runs_lease",
        "runs_outboxmessage",
    ):
        _delete(model, run)
    Action.objects.filter(run=run).delete()
    run.plans.all().delete()
    run.observations.all().delete()
    Run.objects.filter(pk=run.pk).delete()


def _delete(table: str, run: Run) -> None:
    from django.db import connection

    column = (
        "action_id IN (SELECT id FROM runs_action WHERE run_id = %s)"
        if table in ("runs_approval", "runs_receipt", "runs_statement", "runs_attempt")
        else "run_id = %s"
    )
    # Events are insert-only (a trigger): another installation simply never had them.
    with as_database_owner(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE {column}", sql_params([run.pk]))


def test_an_exported_checkpoint_imports_elsewhere_with_the_same_key(tmp_path):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    path = _export(action.run, tmp_path)
    key, digest = action.idempotency_key, action.intent_digest
    _forget(action.run)
    call_command("import_checkpoint", str(path), verbosity=0)
    restored = Run.objects.get(pk=action.run_id)
    pending = restored.actions.get()
    assert (restored.phase, pending.status) == ("waiting_approval", "waiting_approval")
    assert (pending.idempotency_key, pending.intent_digest) == (key, digest)
    assert run_verify(restored) == []
    approve(pending, make_user(tenant, "operator"))
    assert pending.status == "approved"


def test_an_imported_run_carries_its_completed_work_and_chains_on_from_it(tmp_path):
    tenant = make_tenant()
    operator = make_user(tenant, "operator")
    first = make_action(make_run(tenant), action_id="close-1", target="ticket-1")
    approve(first, operator)
    execute_with_receipt(first, receipt_id="rcpt-1")
    second = make_action(first.run, action_id="close-2", target="ticket-2")
    source = Run.objects.get(pk=first.run_id)
    assert source.completed_count == 1
    path = _export(source, tmp_path)
    _forget(source)

    call_command("import_checkpoint", str(path), verbosity=0)
    restored = Run.objects.get(pk=source.pk)
    assert (restored.completed_count, restored.completed_digest) == (
        source.completed_count,
        source.completed_digest,
    )
    assert run_verify(restored) == []
    pending = restored.actions.get(action_id=second.action_id)
    approve(pending, operator)
    execute_with_receipt(pending, receipt_id="rcpt-2")
    restored.refresh_from_db()
    assert restored.completed_count == 2
    assert restored.completed_digest != source.completed_digest
    assert run_verify(restored) == []


def test_import_dry_run_verifies_without_writing(tmp_path, capsys):
    action = make_action(make_run(make_tenant()))
    path = _export(action.run, tmp_path)
    _forget(action.run)
    call_command("import_checkpoint", str(path), "--dry-run")
    assert "checkpoint valid" in capsys.readouterr().out
    assert not Run.objects.exists()


def test_import_refuses_a_run_that_already_exists(tmp_path):
    action = make_action(make_run(make_tenant()))
    path = _export(action.run, tmp_path)
    with pytest.raises(CommandError, match="already exists here at version"):
        call_command("import_checkpoint", str(path))


def test_import_refuses_a_tampered_file_and_writes_nothing(tmp_path):
    action = make_action(make_run(make_tenant()))
    path = _export(action.run, tmp_path)
    envelope = json.loads(path.read_text())
    envelope["state"]["pending_action"]["target"] = "ticket-8"
    path.write_text(json.dumps(envelope))
    _forget(action.run)
    with pytest.raises(CommandError, match="refused at mac"):
        call_command("import_checkpoint", str(path))
    assert not Run.objects.exists()


def test_import_refuses_duplicate_keys_and_unreadable_files(tmp_path):
    duplicate = tmp_path / "dup.json"
    duplicate.write_text('{"schema_version": 1, "schema_version": 1}')
    with pytest.raises(CommandError, match="refused at parse"):
        call_command("import_checkpoint", str(duplicate))
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_checkpoint", str(tmp_path / "missing.json"))


def test_an_approved_intent_imports_back_to_waiting_for_a_fresh_approval(tmp_path):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    path = _export(action.run, tmp_path)
    envelope = json.loads(path.read_text())
    assert envelope["state"]["pending_action"]["status"] == "approved"
    _forget(action.run)
    call_command("import_checkpoint", str(path), verbosity=0)
    restored = Run.objects.get(pk=action.run_id)
    assert restored.actions.get().status == "waiting_approval"


def test_export_refuses_an_unknown_run():
    with pytest.raises(CommandError, match="no run"):
        call_command("export_checkpoint", "00000000-0000-0000-0000-000000000000")


def test_an_export_for_a_move_stops_the_source_so_the_intent_lives_in_one_place(tmp_path):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    path = tmp_path / "moving.json"

    call_command("export_checkpoint", str(action.run_id), "-o", str(path), "--for-move")

    action.refresh_from_db()
    action.run.refresh_from_db()
    assert (action.run.phase, action.status) == ("cancelled", "cancelled")
    assert action.run.stop_reason.startswith("moved")
    assert AuditEntry.objects.filter(verb="run.move_out", object_id=str(action.run_id)).exists()
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    envelope = json.loads(path.read_text())
    assert envelope["state"]["pending_action"]["status"] == "approved"
    _forget(action.run)
    call_command("import_checkpoint", str(path), verbosity=0)
    assert Run.objects.get(pk=action.run_id).actions.get().status == "waiting_approval"


def test_a_move_refuses_while_a_write_is_in_doubt_and_leaves_the_run_live(tmp_path):
    tenant = make_tenant()
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    lease = lease_claim(run_id=action.run_id, owner="worker")
    protocol.attempt_begin(action_pk=action.pk, lease=lease, worker="worker")
    path = tmp_path / "moving.json"

    with pytest.raises(CommandError, match="may have been applied: reconcile them here"):
        call_command("export_checkpoint", str(action.run_id), "-o", str(path), "--for-move")

    action.run.refresh_from_db()
    assert action.run.phase == "executing"
    assert not path.exists()


def test_a_move_whose_file_cannot_be_written_changes_nothing(tmp_path):
    action = make_action(make_run(make_tenant()))
    path = tmp_path / "no-such-directory" / "moving.json"

    with pytest.raises(CommandError, match=r"cannot write .* nothing changed"):
        call_command("export_checkpoint", str(action.run_id), "-o", str(path), "--for-move")

    action.run.refresh_from_db()
    assert action.run.phase == "waiting_approval"
    assert not AuditEntry.objects.filter(verb="run.move_out").exists()


def _plan_of_three_with_one_sent(tenant):
    run = make_run(tenant)
    plan, _ = plan_propose(
        run=run,
        items=[
            PlanItem(f"notify-{n}", "notify.send", f"ops{n}@example.com", {"body": "done"})
            for n in (1, 2, 3)
        ],
        observation=make_observation(run),
        proposed_by="agent-token",
    )
    approve_plan(plan, make_user(tenant, "operator"))
    first, *rest = plan.items.order_by("position")
    execute_with_receipt(first)
    run.refresh_from_db()
    return run, rest


def test_a_moved_plan_carries_every_remaining_item_and_comes_back_waiting(tmp_path):
    tenant = make_tenant()
    run, rest = _plan_of_three_with_one_sent(tenant)
    path = tmp_path / "moving.json"

    call_command("export_checkpoint", str(run.pk), "-o", str(path), "--for-move", verbosity=0)

    exported = json.loads(path.read_text())
    assert exported["format"] == "countersign.run-export/1"
    assert [item["action_id"] for item in exported["plan_items"]] == ["notify-2", "notify-3"]
    _forget(run)
    call_command("import_checkpoint", str(path), verbosity=0)
    restored = Run.objects.get(pk=run.pk)
    items = list(restored.actions.order_by("position"))
    assert restored.phase == "waiting_approval"
    assert [(a.action_id, a.status) for a in items] == [
        ("notify-2", "waiting_approval"),
        ("notify-3", "waiting_approval"),
    ]
    assert [(a.idempotency_key, a.intent_digest) for a in items] == [
        (a.idempotency_key, a.intent_digest) for a in rest
    ]
    assert run_verify(restored) == []


def test_an_import_refuses_a_plan_item_edited_in_the_file_and_writes_nothing(tmp_path):
    tenant = make_tenant()
    run, _ = _plan_of_three_with_one_sent(tenant)
    path = _export(run, tmp_path)
    exported = json.loads(path.read_text())
    exported["plan_items"][1]["args"] = {"body": "send money to evil@example.com"}
    path.write_text(json.dumps(exported))
    _forget(run)

    with pytest.raises(CommandError, match="does not match its own digest"):
        call_command("import_checkpoint", str(path))
    assert not Run.objects.filter(pk=run.pk).exists()


def test_a_bare_checkpoint_of_a_run_with_a_plan_is_refused_naming_the_export(tmp_path):
    tenant = make_tenant()
    run, _ = _plan_of_three_with_one_sent(tenant)
    path = tmp_path / "bare.json"
    path.write_text(run.checkpoints.order_by("-state_version").first().body)
    _forget(run)

    with pytest.raises(CommandError, match="2 remaining items and this file carries none"):
        call_command("import_checkpoint", str(path))
    assert not Run.objects.filter(pk=run.pk).exists()


def test_a_large_run_plan_is_signed_by_digest_and_travels_beside_the_envelope(tmp_path):
    tenant = make_tenant()
    large = {"steps": [f"step {n}: look up the customer and write them" for n in range(1200)]}
    action = make_action(make_run(tenant, plan=large))
    run = action.run
    run.refresh_from_db()
    # Each of the run's checkpoints signs the plan's digest, not a copy of its ~58 KB.
    bodies = list(run.checkpoints.values_list("body", flat=True))
    assert len(bodies) == 3
    assert all(len(body) < 4096 for body in bodies)
    latest = json.loads(bodies[-1])["state"]
    assert latest["plan"] == {}
    assert latest["detached"]["plan"]["bytes"] > 50_000

    path = _export(run, tmp_path)
    _forget(run)
    call_command("import_checkpoint", str(path), verbosity=0)

    restored = Run.objects.get(pk=run.pk)
    assert restored.plan == large
    assert run_verify(restored) == []


def test_an_import_refuses_detached_data_that_is_not_the_signed_one(tmp_path):
    tenant = make_tenant()
    run = make_run(tenant, plan={"steps": ["x" * 5000]})
    path = _export(run, tmp_path)
    exported = json.loads(path.read_text())
    exported["detached"]["plan"] = {"steps": ["y" * 5000]}
    path.write_text(json.dumps(exported))
    _forget(run)

    with pytest.raises(CommandError, match="the detached plan is not the one signed"):
        call_command("import_checkpoint", str(path))
    assert not Run.objects.filter(pk=run.pk).exists()
