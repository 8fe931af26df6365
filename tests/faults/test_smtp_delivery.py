"""An smtp connector through Countersign, with real worker processes that load it from
COUNTERSIGN_CONNECTORS and a real SMTP server: an approved message arrives once with its
receipt, and a message whose answer was cut off becomes a reconciliation case, never a resend."""

from __future__ import annotations

import contextlib
import hashlib

import pytest
from django.core.management import call_command

from reconciliation.models import ReconciliationCase
from runs.models import Action
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.processes import settled
from tests.registry import connector_tools, registered
from tests.smtp import Mailbox, connector_file, smtp_server

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sandbox"])


@pytest.fixture
def mail_tool(tmp_path, monkeypatch):
    """Starts a mail server for a Mailbox and declares `mail.send` for it: here through the
    registry, in the worker processes through COUNTERSIGN_CONNECTORS (Workers.env passes this
    process's environment on)."""

    def declare(mailbox: Mailbox):
        port = stack.enter_context(smtp_server(mailbox))
        [tool] = connector_tools(tmp_path, connector_file(port))
        monkeypatch.setenv("COUNTERSIGN_CONNECTORS", str(tmp_path / "connectors.toml"))
        return stack.enter_context(registered(tool))

    with contextlib.ExitStack() as stack:
        yield declare


def approved_message(tool) -> Action:
    tenant = make_tenant()
    action = make_action(
        make_run(tenant, goal="tell ops that db-2's disk is nearly full"),
        action_id="notify-ops",
        tool=tool.name,
        target="ops@example.com",
        args={"subject": "Disk at 91% on db-2", "body": "Please make room before noon."},
    )
    approve(action, make_user(tenant, "operator"))
    return action


def message_id(action: Action) -> str:
    digest = hashlib.sha256(action.idempotency_key.encode()).hexdigest()[:40]
    return f"<{digest}@example.test>"


def test_an_approved_message_arrives_once_with_its_receipt(workers, mail_tool):
    mailbox = Mailbox()
    action = settled(workers, approved_message(mail_tool(mailbox)))

    assert action.status == "succeeded"
    receipt = action.receipt
    assert (receipt.receipt_id, receipt.status, receipt.source) == (
        message_id(action),
        "accepted",
        "response",
    )
    assert (receipt.idempotency_key, receipt.intent_digest) == (
        action.idempotency_key,
        action.intent_digest,
    )
    [message] = mailbox.messages
    assert message["Message-ID"] == receipt.receipt_id
    assert message["X-Countersign-Intent"].lstrip() == action.intent_digest

    call_command("sweep", verbosity=0)
    assert workers.run_burst() == 0
    assert mailbox.message_ids() == [receipt.receipt_id]


def test_a_message_whose_answer_was_cut_off_goes_to_a_person_and_is_never_resent(
    workers, mail_tool
):
    mailbox = Mailbox(cut=True)
    action = settled(workers, approved_message(mail_tool(mailbox)))

    assert (action.status, action.error_class) == ("uncertain", "tool_result_uncertain")
    call_command("sweep", verbosity=0)  # and the workers again: nothing may send it twice
    assert workers.run_burst() == 0
    action.refresh_from_db()
    action.run.refresh_from_db()
    [case] = ReconciliationCase.objects.filter(action=action)
    assert case.reason == "tool_result_uncertain"
    assert action.run.phase == "waiting_reconciliation"
    assert action.attempts.count() == 1
    assert message_id(action) in action.attempts.get().error  # what the reconciler looks for
    assert mailbox.message_ids() == [message_id(action)]
