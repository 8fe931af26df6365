"""The audit chain detects any edit, deletion or reordering; its head can be exported."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from control.audit import audit_record
from control.models import AuditEntry

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
