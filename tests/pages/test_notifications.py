"""Notifications about approvals: email through Django's backend, and a JSON webhook signed
with HMAC. The webhook receiver here is a real HTTP server on localhost."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail

from runs.execution.sweep import sweep_once
from runs.models import OutboxMessage
from runs.notifications import (
    EXPIRED,
    EXPIRING,
    REQUESTED,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookError,
    approval_notify,
    webhook_verify,
)
from runs.services import approval_expire, approval_warn_expiring, tool_policy_set
from tests.factories import approve, make_action, make_run, make_user
from tests.pages.conftest import make_expired, make_waiting

pytestmark = pytest.mark.django_db
SECRET = "webhook-test-secret"


@pytest.fixture
def receiver():
    """A webhook endpoint that records what it was sent and answers `status`."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        status = 204

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"headers": dict(self.headers), "body": body})
            self.send_response(Handler.status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {
        "url": f"http://127.0.0.1:{server.server_port}/hook",
        "received": received,
        "handler": Handler,
    }
    server.shutdown()
    server.server_close()


def with_email(user, address: str):
    user.email = address
    user.save(update_fields=["email"])
    return user


def test_a_request_emails_everyone_who_may_decide_with_what_to_judge(tenant):
    with_email(make_user(tenant, "operator"), "op@example.com")
    with_email(make_user(tenant, "admin"), "admin@example.com")
    with_email(make_user(tenant, "auditor"), "auditor@example.com")
    action = make_waiting(tenant)

    assert approval_notify(str(action.run_id), action=str(action.pk), kind=REQUESTED) == 1

    (message,) = mail.outbox
    assert message.to == ["admin@example.com", "op@example.com"]
    assert message.subject == "Approval requested: ticket.close ticket-7"
    assert action.intent_digest in message.body
    assert f"/inbox/?run={action.run_id}" in message.body


def test_a_request_already_decided_sends_nothing(tenant):
    with_email(make_user(tenant, "operator"), "op@example.com")
    action = make_waiting(tenant)
    approve(action, make_user(tenant, "operator"))

    assert approval_notify(action=str(action.pk), kind=EXPIRING) == 0
    assert mail.outbox == []


def test_an_expired_request_is_announced_as_never_approved(tenant):
    with_email(make_user(tenant, "operator"), "op@example.com")
    action = make_expired(tenant)

    approval_notify(action=str(action.pk), kind=EXPIRED)

    assert mail.outbox[0].subject.startswith("Approval expired, never approved")


def test_the_webhook_receives_signed_json(tenant, settings, receiver):
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = receiver["url"]
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = SECRET
    action = make_waiting(tenant)

    assert approval_notify(action=str(action.pk), kind=REQUESTED) == 1

    (delivery,) = receiver["received"]
    headers, body = delivery["headers"], delivery["body"]
    assert webhook_verify(
        secret=SECRET,
        timestamp=headers[TIMESTAMP_HEADER],
        body=body,
        signature=headers[SIGNATURE_HEADER],
    )
    assert not webhook_verify(
        secret="another-secret",
        timestamp=headers[TIMESTAMP_HEADER],
        body=body,
        signature=headers[SIGNATURE_HEADER],
    )
    assert not webhook_verify(
        secret=SECRET,
        timestamp=headers[TIMESTAMP_HEADER],
        body=body.replace(b"ticket-7", b"ticket-8"),
        signature=headers[SIGNATURE_HEADER],
    )
    payload = json.loads(body)
    assert payload["id"] == f"requested:{action.pk}"
    assert payload["action"]["intent_digest"] == action.intent_digest
    assert payload["action"]["state_version"] == action.base_version


def test_a_webhook_that_fails_fails_the_job_so_rq_retries_it(tenant, settings, receiver):
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = receiver["url"]
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = SECRET
    receiver["handler"].status = 500
    action = make_waiting(tenant)

    with pytest.raises(WebhookError, match="500"):
        approval_notify(action=str(action.pk), kind=REQUESTED)


def test_an_unknown_kind_is_refused(tenant):
    action = make_waiting(tenant)

    with pytest.raises(ValueError, match="unknown notification kind"):
        approval_notify(action=str(action.pk), kind="reminder")


def test_the_services_queue_each_approval_moment_once_for_the_notifier(tenant, mailoutbox):
    with_email(make_user(tenant, "operator"), "ops@example.com")
    tool_policy_set(
        tenant=tenant,
        tool="ticket.close",
        needs_approval=True,
        four_eyes=False,
        required_approvals=1,
        approval_seconds=1,
        actor="tests",
    )
    action = make_action(make_run(tenant))
    assert approval_warn_expiring(action=action) is True
    assert approval_warn_expiring(action=action) is False
    sweep_once()
    time.sleep(1.1)
    assert approval_expire(action=action) is True
    kinds = [
        m.payload["kind"]
        for m in OutboxMessage.objects.filter(
            action=action, job="runs.notifications.approval_notify"
        ).order_by("pk")
    ]
    assert kinds == ["requested", "expiring", "expired"]
    for message in OutboxMessage.objects.filter(job="runs.notifications.approval_notify"):
        approval_notify(str(action.run_id), **message.payload)
    subjects = [mail.subject for mail in mailoutbox]
    assert subjects == [f"Approval expired, never approved: ticket.close {action.target}"]
