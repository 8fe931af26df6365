"""Sending one notification at least once: the mails and the webhook, the outbox message
confirmed when a channel accepted it, a failed send handed to RQ again after a backoff, and
a lost job handed over again by the sweep."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.core.mail import send_mass_mail
from django.db.models.functions import Now
from django.utils import timezone

from runs.models import Action, OutboxMessage
from runs.models.notify_kinds import ESCALATED, EXPIRED, EXPIRING, KINDS, REQUESTED
from runs.notify.mail import mails, notification_payload
from runs.notify.webhook import STANDARD, WebhookError, webhook_send
from runs.record.outbox import NOTIFY_JOB

logger = logging.getLogger(__name__)

# The status an action must still have for the moment to be worth telling.
STILL_TRUE = {
    REQUESTED: Action.Status.WAITING_APPROVAL,
    EXPIRING: Action.Status.WAITING_APPROVAL,
    EXPIRED: Action.Status.EXPIRED,
    ESCALATED: Action.Status.WAITING_APPROVAL,
}

NOTIFY_ATTEMPTS = 8
RETRY_FIRST_SECONDS = 30.0
RETRY_CAP_SECONDS = 3600.0
LOST_AFTER = timedelta(minutes=5)


def deliver(*, action: str, kind: str) -> int:
    """The job's work: sends one notification about one action and confirms its outbox message;
    returns how many channels accepted it. A channel that fails is recorded for a retry."""
    if kind not in KINDS:
        raise ValueError(f"unknown notification kind {kind!r}")
    messages = OutboxMessage.objects.filter(job=NOTIFY_JOB, action_id=action, payload__kind=kind)
    first = messages.order_by("created_at").values_list("created_at", flat=True).first()
    try:
        sent = _send(action=action, kind=kind, occurred_at=first or timezone.now())
    except (WebhookError, requests.RequestException, OSError) as error:
        reason = delivery_failure(error)
        logger.warning("notification %s:%s not delivered: %s", kind, action, reason)
        _retry_later(messages, reason)
        return 0
    messages.update(confirmed_at=Now(), last_error="")
    return sent


def _send(*, action: str, kind: str, occurred_at: datetime) -> int:
    row = (
        Action.objects.select_related("run", "tenant", "observation", "plan")
        .filter(pk=action, status=STILL_TRUE[kind])
        .first()
    )
    if row is None:
        return 0  # the moment passed (a request already decided): nothing to tell
    payload = notification_payload(row, kind=kind)
    sent = 0
    written = mails(row, payload)
    if written:
        send_mass_mail(written)
        sent += 1
    url = getattr(settings, "COUNTERSIGN_NOTIFY_WEBHOOK_URL", "")
    secret = getattr(settings, "COUNTERSIGN_NOTIFY_WEBHOOK_SECRET", "")
    if url and secret:
        webhook_send(
            url=url,
            secret=secret,
            payload=payload,
            occurred_at=occurred_at,
            format=getattr(settings, "COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT", STANDARD),
        )
        sent += 1
    return sent


def delivery_failure(error: Exception) -> str:
    """Why a send failed, as recorded and logged: never the webhook's URL (requests repeats
    it, path and query included, and a webhook URL often carries a token) nor the secret."""
    if isinstance(error, requests.RequestException):
        return f"{type(error).__name__}: the webhook could not be reached"
    detail = str(error) if isinstance(error, WebhookError) else getattr(error, "strerror", "")
    return f"{type(error).__name__}: {detail or 'the email could not be sent'}"[:2000]


def _retry_later(messages, reason: str) -> None:
    """Hands the message to RQ again after a backoff; after NOTIFY_ATTEMPTS, gives up loudly."""
    for message in messages:
        if message.delivery_attempts >= NOTIFY_ATTEMPTS:
            logger.error("notification %s given up after %s tries", message.pk, NOTIFY_ATTEMPTS)
            messages.filter(pk=message.pk).update(last_error=f"gave up: {reason}")
            continue
        pause = min(RETRY_FIRST_SECONDS * 2 ** (message.delivery_attempts - 1), RETRY_CAP_SECONDS)
        messages.filter(pk=message.pk).update(
            delivered_at=None,
            relay_after=Now() + timedelta(seconds=pause),
            last_error=reason,
        )


def requeue_lost() -> int:
    """Notifications handed to RQ long ago and never confirmed nor failed: their job was lost
    (Redis lost its data, a worker died mid-send). They are handed over again."""
    return (
        OutboxMessage.objects.filter(
            job=NOTIFY_JOB,
            confirmed_at__isnull=True,
            delivered_at__lte=Now() - LOST_AFTER,
        )
        .exclude(last_error__startswith="gave up")
        .update(delivered_at=None, relay_after=None)
    )
