"""The audit chain detects any edit, deletion or reordering; its head can be exported."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from control.foundation.audit import audit_record, entry_hash, hashed_fields
from control.models import AuditChainHead, AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def chain():
    for number in range(5):
        audit_record(actor="alice", verb="action.approve", object_id=str(number), reason="ok")


def _execute(sql: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])


def test_an_intact_chain_verifies_and_exports_its_head(chain, capsys):
    call_command("verify_audit", head=True)
    head = json.loads(capsys.readouterr().out)
    assert head == {"seq": 5, "hash": AuditEntry.objects.get(seq=5).hash}


def test_an_edited_entry_is_detected(chain):
    _execute("UPDATE control_auditentry SET reason = 'forged' WHERE seq = 3")
    with pytest.raises(CommandError, match="#3 was altered"):
        call_command("verify_audit")


def test_a_deleted_entry_is_detected(chain):
    _execute("DELETE FROM control_auditentry WHERE seq = 2")
    with pytest.raises(CommandError, match="#2 is missing"):
        call_command("verify_audit")


def test_a_deleted_tail_is_detected_against_the_head(chain):
    _execute("DELETE FROM control_auditentry WHERE seq = 5")
    with pytest.raises(CommandError, match="head says #5"):
        call_command("verify_audit")


def test_reordered_entries_are_detected(chain):
    _execute("UPDATE control_auditentry SET seq = seq + 100 WHERE seq IN (2, 3)")
    _execute("UPDATE control_auditentry SET seq = 3 WHERE seq = 102")
    _execute("UPDATE control_auditentry SET seq = 2 WHERE seq = 103")
    with pytest.raises(CommandError, match="does not link"):
        call_command("verify_audit")


def _rewrite_from(seq: int, *, reason: str) -> None:
    """What a database writer without the key can do: edit an entry, recompute the plain
    hashes of it and every later entry, and point the head at the new end."""
    prev_hash = AuditEntry.objects.get(seq=seq - 1).hash
    for entry in AuditEntry.objects.filter(seq__gte=seq).order_by("seq"):
        if entry.seq == seq:
            entry.reason = reason
        entry.prev_hash = prev_hash
        entry.hash = entry_hash(prev_hash=prev_hash, fields=hashed_fields(entry))
        entry.save(update_fields=["reason", "prev_hash", "hash"])
        prev_hash = entry.hash
    AuditChainHead.objects.filter(id=1).update(hash=prev_hash)


def test_entries_rewritten_with_recomputed_hashes_are_caught_by_the_signed_head(chain):
    _rewrite_from(3, reason="forged")
    with pytest.raises(CommandError, match="head's signature does not verify"):
        call_command("verify_audit")


def test_a_truncated_tail_with_a_moved_head_is_caught_by_the_signed_head(chain):
    _execute("DELETE FROM control_auditentry WHERE seq = 5")
    fourth = AuditEntry.objects.get(seq=4).hash
    AuditChainHead.objects.filter(id=1).update(seq=4, hash=fourth)
    with pytest.raises(CommandError, match="head's signature does not verify"):
        call_command("verify_audit")


def test_expect_compares_the_chain_with_a_head_kept_elsewhere(chain, capsys):
    call_command("verify_audit", head=True)
    kept = json.loads(capsys.readouterr().out)
    audit_record(actor="bob", verb="action.reject", object_id="6", reason="later")
    call_command("verify_audit", expect=f"{kept['seq']}:{kept['hash']}")

    with pytest.raises(CommandError, match=r"#5 has hash .* rewritten"):
        call_command("verify_audit", expect=f"5:sha256:{'0' * 64}")
    with pytest.raises(CommandError, match="#9 of the exported head is gone: the chain was"):
        call_command("verify_audit", expect=f"9:{kept['hash']}")
    with pytest.raises(CommandError, match="--expect wants SEQ:sha256"):
        call_command("verify_audit", expect="five")
