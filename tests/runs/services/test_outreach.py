"""A request still waiting past its tool policy's SLA is escalated once: its contacts are
mailed, the webhook hears `escalated`, and the request waits on, to expire never approved."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import django_rq
import pytest
from django.conf import settings
from django.db import connection

from runs.execution.sweep import sweep_once
from runs.models import Escalation, OutboxMessage
from runs.models.notify_kinds import ESCALATED
from runs.notifications import approval_notify
from runs.notify.events import EVENT_TYPES
from runs.services import approval_escalate, tool_policy_set
from tests.factories import approve, make_action, make_run, make_tenant, make_user
from tests.pages.conftest import WEBHOOK_SECRET

CONTACTS = ["lead@example.com", "duty@example.com"]


@pytest.fixture
def queue():
    queue = django_rq.get_queue(settings.RQ_EXECUTION_QUEUE)
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


def escalate_after(tenant, seconds: int, *, contacts=CONTACTS, tool="ticket.close") -> None:
    tool_policy_set(
        tenant=tenant,
        tool=tool,
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=3600,
        escalation_seconds=seconds,
        escalation_contacts=contacts,
        actor="tests",
    )


def escalation_messages(action) -> list[OutboxMessage]:
    return list(
        OutboxMessage.objects.filter(
            action=action, job="runs.notifications.approval_notify", payload__kind=ESCALATED
        )
    )


@pytest.mark.django_db
def test_a_request_is_escalated_once_past_its_sla_and_never_before(queue, mailoutbox):
    tenant = make_tenant()
    escalate_after(tenant, 1)
    action = make_action(make_run(tenant))
    version = action.run.state_version

    assert sweep_once().escalated == 0
    assert escalation_messages(action) == []
    time.sleep(1.1)
    assert sweep_once().escalated == 1
    assert sweep_once().escalated == 0
    assert approval_escalate(action=action) is False  # the marker holds

    assert len(escalation_messages(action)) == 1
    escalation = Escalation.objects.get(action=action)
    assert (escalation.sla_seconds, escalation.contacts) == (1, CONTACTS)
    assert approval_notify(action=str(action.pk), kind=ESCALATED) == 1
    (mail,) = mailoutbox
    assert mail.to == CONTACTS
    assert mail.subject == "Escalated, still waiting for approval: ticket.close ticket-7"
    assert action.intent_digest in mail.body
    assert "/decide/" not in mail.body  # a contact gets the inbox, not a decision link
    action.refresh_from_db()
    action.run.refresh_from_db()
    assert action.status == "waiting_approval"
    assert action.run.state_version == version  # no event: the approver's binding holds


@pytest.mark.django_db
def test_a_request_decided_before_its_sla_is_never_escalated(queue):
    tenant = make_tenant()
    escalate_after(tenant, 1)
    action = make_action(make_run(tenant))
    approve(action, make_user(tenant, "operator"))
    time.sleep(1.1)

    assert sweep_once().escalated == 0
    assert approval_escalate(action=action) is False
    assert not Escalation.objects.exists()


@pytest.mark.django_db
def test_another_tools_sla_or_a_policy_without_one_escalates_nothing(queue):
    tenant = make_tenant()
    escalate_after(tenant, 1, tool="notify.send")
    action = make_action(make_run(tenant))
    time.sleep(1.1)

    assert sweep_once().escalated == 0
    assert escalation_messages(action) == []


@pytest.mark.django_db
def test_an_escalation_whose_request_was_decided_meanwhile_sends_nothing(queue, mailoutbox):
    tenant = make_tenant()
    escalate_after(tenant, 1)
    action = make_action(make_run(tenant))
    time.sleep(1.1)
    sweep_once()
    approve(action, make_user(tenant, "operator"))

    assert approval_notify(action=str(action.pk), kind=ESCALATED) == 0
    assert mailoutbox == []


@pytest.mark.django_db(transaction=True)
def test_two_sweepers_at_once_escalate_each_request_exactly_once(queue):
    tenant = make_tenant()
    escalate_after(tenant, 1)
    actions = [make_action(make_run(tenant), target=f"ticket-{n}") for n in range(1, 7)]
    time.sleep(1.1)
    reports = []
    start = threading.Barrier(2)

    def sweep():
        try:
            start.wait()
            reports.append(sweep_once())
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(report.escalated for report in reports) == len(actions)
    assert not any(report.errors for report in reports)
    for action in actions:
        assert len(escalation_messages(action)) == 1


@pytest.mark.django_db
def test_the_webhook_hears_the_escalation_as_its_own_kind(queue, settings):
    received = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{server.server_port}/hook"
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = WEBHOOK_SECRET
    try:
        tenant = make_tenant()
        escalate_after(tenant, 1)
        action = make_action(make_run(tenant))
        time.sleep(1.1)
        sweep_once()

        assert approval_notify(action=str(action.pk), kind=ESCALATED) == 2  # mail and webhook
    finally:
        server.shutdown()
        server.server_close()
    (event,) = received
    assert (event["id"], event["type"]) == (f"escalated:{action.pk}", EVENT_TYPES[ESCALATED])
    assert event["data"]["action"]["intent_digest"] == action.intent_digest
