"""Notifications about approvals: email through Django's backend, and a signed webhook (its
formats: test_webhook_format.py). The webhook receiver is a real HTTP server on localhost."""

from __future__ import annotations

import json
import socket
import time
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from runs.execution.sweep import sweep_once
from runs.models import OutboxMessage
from runs.models.notify_kinds import EXPIRED, EXPIRING, REQUESTED
from runs.notifications import approval_notify
from runs.notify.delivery import LOST_AFTER, NOTIFY_ATTEMPTS
from runs.record.outbox import NOTIFY_JOB, relay
from runs.services import approval_expire, approval_warn_expiring, tool_policy_set
from tests.factories import approve, make_action, make_run, make_user
from tests.pages.conftest import WEBHOOK_SECRET, make_expired, make_waiting

pytestmark = pytest.mark.django_db
SECRET = WEBHOOK_SECRET


def with_email(user, address: str):
    user.email = address
    user.save(update_fields=["email"])
    return user


def test_a_request_emails_everyone_who_may_decide_each_with_a_link_of_their_own(tenant):
    with_email(make_user(tenant, "operator"), "op@example.com")
    with_email(make_user(tenant, "admin"), "admin@example.com")
    with_email(make_user(tenant, "auditor"), "auditor@example.com")
    action = make_waiting(tenant)

    assert approval_notify(str(action.run_id), action=str(action.pk), kind=REQUESTED) == 1

    assert [message.to for message in mail.outbox] == [["admin@example.com"], ["op@example.com"]]
    links = set()
    for message in mail.outbox:
        assert message.subject == "Approval requested: ticket.close ticket-7"
        assert action.intent_digest in message.body
        assert f"/inbox/?run={action.run_id}" in message.body
        links |= {line for line in message.body.splitlines() if "/decide/" in line}
    assert len(links) == 2  # one link per person, never shared


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


def _notify_message(action) -> OutboxMessage:
    return OutboxMessage.objects.get(job=NOTIFY_JOB, action=action, payload__kind=REQUESTED)


def _hand_over(message: OutboxMessage) -> None:
    """What the relay does after commit (and the sweep after a backoff)."""
    assert relay(OutboxMessage.objects.filter(pk=message.pk)) == 1


def test_a_failing_webhook_is_tried_again_after_a_backoff_until_it_accepts(
    tenant, settings, receiver, redis_queue
):
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = receiver["url"]
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = SECRET
    receiver["handler"].status = 500
    action = make_waiting(tenant)
    message = _notify_message(action)
    _hand_over(message)

    assert approval_notify(action=str(action.pk), kind=REQUESTED) == 0

    message.refresh_from_db()
    assert (message.delivered_at, message.confirmed_at) == (None, None)
    assert "500" in message.last_error
    assert 25 < (message.relay_after - timezone.now()).total_seconds() <= 30
    assert relay(OutboxMessage.objects.filter(pk=message.pk)) == 0  # not before the backoff

    OutboxMessage.objects.filter(pk=message.pk).update(relay_after=timezone.now())
    _hand_over(message)
    receiver["handler"].status = 204
    assert approval_notify(action=str(action.pk), kind=REQUESTED) == 1

    message.refresh_from_db()
    assert message.confirmed_at is not None
    assert (message.delivery_attempts, message.last_error) == (2, "")
    ids = [json.loads(delivery["body"])["id"] for delivery in receiver["received"]]
    assert ids == [f"requested:{action.pk}"] * 2  # at least once; the receiver dedupes by id


def test_a_notification_whose_job_redis_lost_is_handed_over_again(tenant, redis_queue):
    action = make_waiting(tenant)
    message = _notify_message(action)
    _hand_over(message)
    redis_queue.connection.flushdb()  # the job is gone; PostgreSQL still knows

    sweep_once()
    message.refresh_from_db()
    assert message.delivery_attempts == 1  # too early to call it lost

    OutboxMessage.objects.filter(pk=message.pk).update(
        delivered_at=timezone.now() - LOST_AFTER - timedelta(seconds=1)
    )
    sweep_once()

    message.refresh_from_db()
    assert message.delivery_attempts == 2
    assert message.delivered_at > timezone.now() - timedelta(seconds=30)


def test_a_notification_that_never_gets_through_is_given_up_loudly(
    tenant, settings, receiver, redis_queue
):
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = receiver["url"]
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = SECRET
    receiver["handler"].status = 503
    action = make_waiting(tenant)
    message = _notify_message(action)
    OutboxMessage.objects.filter(pk=message.pk).update(delivery_attempts=NOTIFY_ATTEMPTS)

    assert approval_notify(action=str(action.pk), kind=REQUESTED) == 0

    message.refresh_from_db()
    assert message.last_error.startswith("gave up: WebhookError")
    assert message.confirmed_at is None


def test_a_notification_carries_no_secret_and_no_internal_url(tenant, settings, receiver):
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = receiver["url"]
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = SECRET
    with_email(make_user(tenant, "operator"), "op@example.com")
    action = make_waiting(tenant)

    assert approval_notify(action=str(action.pk), kind=REQUESTED) == 2

    (message,) = mail.outbox
    (delivery,) = receiver["received"]
    sent = "\n".join(
        [message.subject, message.body, delivery["body"].decode(), json.dumps(delivery["headers"])]
    )
    assert f"/inbox/?run={action.run_id}" in sent  # the links that are meant to be there
    for internal in (SECRET, receiver["url"], settings.REDIS_URL, settings.SANDBOX_URL):
        assert internal not in sent


def test_a_failed_delivery_records_neither_the_webhook_url_nor_the_secret(
    tenant, settings, redis_queue, caplog
):
    with socket.socket() as probe:  # a port nothing listens on: the connection is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = "capability-token-in-the-url"
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{port}/hooks/{token}?key={token}"
    settings.COUNTERSIGN_NOTIFY_WEBHOOK_SECRET = SECRET
    action = make_waiting(tenant)
    message = _notify_message(action)
    _hand_over(message)

    assert approval_notify(action=str(action.pk), kind=REQUESTED) == 0

    message.refresh_from_db()
    assert message.last_error == "ConnectionError: the webhook could not be reached"
    for recorded in (message.last_error, caplog.text):
        assert token not in recorded
        assert SECRET not in recorded


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
