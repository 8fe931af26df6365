"""Rotating the checkpoint MAC key: nothing is re-signed, old checkpoints verify until their key
is removed, and each step is in the audit chain."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from control.foundation.audit import audit_verify
from control.foundation.env import env_signing_keys
from control.models import AuditEntry
from runs.exceptions import CheckpointError
from runs.models import Checkpoint
from runs.record.checkpoints import checkpoint_verify, latest_checkpoint
from tests.factories import make_action, make_run, make_tenant

pytestmark = pytest.mark.django_db

OLD_SECRET = b"old-checkpoint-secret-0123456789abcdef"


@pytest.fixture
def old_key_only(settings):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"old": OLD_SECRET}
    return settings


def _run(command: str, *args: str, capsys) -> str:
    call_command("checkpoint_keys", command, *args)
    return capsys.readouterr().out.strip()


def _deploy(value: str, settings, monkeypatch) -> None:
    """What the operator does with the printed value: set it and restart."""
    monkeypatch.setenv("COUNTERSIGN_CHECKPOINT_KEYS", value)
    settings.COUNTERSIGN_CHECKPOINT_KEYS = env_signing_keys(
        "COUNTERSIGN_CHECKPOINT_KEYS", default=None
    )


def test_list_names_the_signing_key_first_and_never_a_secret(settings, capsys):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"new": b"x" * 32, "old": OLD_SECRET}

    out = _run("list", capsys=capsys)

    assert out.splitlines() == ["new\tsigns and verifies", "old\tverifies"]
    assert OLD_SECRET.decode() not in out


def test_add_prints_the_value_with_a_new_random_key_first(old_key_only, capsys):
    first = _run("add", "--id", "new", capsys=capsys)
    second = _run("add", "--id", "new", capsys=capsys)

    kid, _, secret = first.split(",")[0].partition(":")
    assert kid == "new"
    assert len(secret) >= 43
    assert first.split(",")[1] == "old:" + OLD_SECRET.decode()
    assert first != second


def test_add_refuses_an_id_in_use_or_malformed(old_key_only, capsys):
    for key_id in ("old", "a:b", "a,b", "", "-leading-dash"):
        with pytest.raises(CommandError):
            call_command("checkpoint_keys", "add", "--id", key_id)


def test_add_refuses_an_id_that_once_signed_stored_checkpoints(settings):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"2025": b"y" * 32}
    make_run(make_tenant())
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"2026": b"z" * 32}

    with pytest.raises(CommandError, match="pick an id never used"):
        call_command("checkpoint_keys", "add", "--id", "2025")


def test_add_is_audited_without_the_secret(old_key_only, capsys):
    value = _run("add", "--id", "new", "--actor", "ops@example", capsys=capsys)

    entry = AuditEntry.objects.get(verb="checkpoint_key.add")
    assert (entry.actor, entry.object_id) == ("ops@example", "new")
    assert entry.data == {"signs": "new", "verifies": ["new", "old"]}
    secret = value.split(",")[0].partition(":")[2]
    assert secret not in str(entry.data) + entry.reason
    assert audit_verify().ok


def test_a_rotation_keeps_old_checkpoints_verifying_until_the_old_key_is_retired(
    old_key_only, settings, monkeypatch, capsys
):
    run = make_run(make_tenant())
    before = latest_checkpoint(run)
    assert before.key_id == "old"

    _deploy(_run("add", "--id", "new", capsys=capsys), settings, monkeypatch)
    assert checkpoint_verify(before.body)["run_id"] == str(run.pk)
    action = make_action(run)
    after = latest_checkpoint(action.run)
    assert after.key_id == "new"
    assert checkpoint_verify(after.body)["state_version"] == after.state_version
    # Nothing was re-signed behind anyone's back.
    assert Checkpoint.objects.get(pk=before.pk).body == before.body

    # The tenant's signed rows (its connector enablements) move to the new key first, as the
    # rotation steps in SECURITY.md say; checkpoints are never re-signed.
    _run("resign-rows", "--id", "old", capsys=capsys)
    _deploy(_run("retire", "--id", "old", capsys=capsys), settings, monkeypatch)

    assert list(settings.COUNTERSIGN_CHECKPOINT_KEYS) == ["new"]
    with pytest.raises(CheckpointError) as refused:
        checkpoint_verify(before.body)
    assert refused.value.step == "mac"
    assert checkpoint_verify(after.body)["state_version"] == after.state_version


def test_retire_refuses_the_signing_key(old_key_only):
    with pytest.raises(CommandError, match="signs now"):
        call_command("checkpoint_keys", "retire", "--id", "old")


def test_retire_refuses_while_a_runs_latest_checkpoint_needs_the_key(
    old_key_only, settings, monkeypatch, capsys
):
    make_run(make_tenant(connectors=False))  # no signed row needs the old key, only the run
    _deploy(_run("add", "--id", "new", capsys=capsys), settings, monkeypatch)

    with pytest.raises(CommandError, match="1 run"):
        call_command("checkpoint_keys", "retire", "--id", "old")
    forced = _run("retire", "--id", "old", "--force", capsys=capsys)

    assert forced.startswith("new:")
    assert "old:" not in forced
    entry = AuditEntry.objects.get(verb="checkpoint_key.retire")
    assert entry.data["latest_checkpoints_signed"] == 1
    assert entry.reason.startswith("forced")


def test_check_counts_checkpoints_per_key_id(old_key_only, settings, monkeypatch, capsys):
    tenant = make_tenant()
    run = make_run(tenant)
    make_run(tenant)
    _deploy(_run("add", "--id", "new", capsys=capsys), settings, monkeypatch)
    make_action(run)
    signed_new = Checkpoint.objects.filter(key_id="new").count()

    out = _run("check", capsys=capsys)

    lines = out.splitlines()
    assert lines[0] == f"new\t{signed_new} checkpoint(s), latest of 1 run(s)\tconfigured, signs"
    assert lines[1] == "old\t2 checkpoint(s), latest of 1 run(s)\tconfigured"
    assert lines[-1] == "every key id in use is configured"


def test_check_fails_when_a_key_id_in_use_is_no_longer_configured(settings, capsys):
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"gone": b"g" * 32}
    make_run(make_tenant())
    settings.COUNTERSIGN_CHECKPOINT_KEYS = {"new": b"n" * 32}

    with pytest.raises(CommandError, match=r"gone sign stored checkpoints but are not configured"):
        call_command("checkpoint_keys", "check")
    assert "gone\t1 checkpoint(s), latest of 1 run(s)\tNOT CONFIGURED" in capsys.readouterr().out


def test_check_verify_finds_a_tampered_checkpoint(old_key_only, capsys):
    run = make_run(make_tenant())
    checkpoint = latest_checkpoint(run)
    tampered = checkpoint.body.replace('"retry_count":0', '"retry_count":1')
    assert tampered != checkpoint.body
    # An attacker with database access; no service ever rewrites a checkpoint.
    Checkpoint.objects.filter(pk=checkpoint.pk).update(body=tampered)

    _run("check", capsys=capsys)
    with pytest.raises(CommandError, match="1 latest checkpoint"):
        call_command("checkpoint_keys", "check", "--verify")
