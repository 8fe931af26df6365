"""Sending the notification webhook: one POST per moment, in the configured format
(runs.notify.signing): a CloudEvents 1.0 event in structured mode (runs.notify.events) signed
as Standard Webhooks sign, or the deprecated bare payload."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

import requests
from django.core.exceptions import ImproperlyConfigured

from control.foundation.canonical import canonical_json
from runs.notify.events import cloud_event
from runs.notify.signing import (
    FORMATS,
    LEGACY,
    SIGNATURE_HEADER,
    STANDARD,
    TIMESTAMP_HEADER,
    standard_key,
    standard_signature,
    webhook_signature,
)

WEBHOOK_TIMEOUT = (3.05, 10.0)


class WebhookError(Exception):
    """The webhook did not answer 2xx: not delivered, tried again later."""


def webhook_send(
    *, url: str, secret: str, payload: dict, occurred_at: datetime, format: str = STANDARD
) -> None:
    """POSTs the moment's payload (runs.notify.mail.notification_payload), which happened at
    `occurred_at`; raises WebhookError unless the webhook answered 2xx."""
    timestamp = str(int(time.time()))
    if format == LEGACY:
        body = canonical_json(payload)
        headers = {
            "Content-Type": "application/json",
            "X-Countersign-Delivery": str(uuid.uuid4()),
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: webhook_signature(secret=secret, timestamp=timestamp, body=body),
        }
    elif format == STANDARD:
        event = cloud_event(payload, occurred_at=occurred_at)
        body = canonical_json(event)
        # The moment's id, the same on every retry: a receiver dedupes by it.
        webhook_id = event["id"]
        signature = standard_signature(
            key=standard_key(secret), webhook_id=webhook_id, timestamp=timestamp, body=body
        )
        headers = {
            "Content-Type": "application/cloudevents+json; charset=utf-8",
            "webhook-id": webhook_id,
            "webhook-timestamp": timestamp,
            "webhook-signature": signature,
        }
    else:
        raise ImproperlyConfigured(
            f"COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT must be one of {', '.join(FORMATS)}; got {format!r}"
        )
    response = requests.post(
        url,
        data=body,
        headers={"User-Agent": "Countersign-Notifier/1", **headers},
        timeout=WEBHOOK_TIMEOUT,
        allow_redirects=False,
    )
    if not 200 <= response.status_code < 300:
        raise WebhookError(f"webhook answered {response.status_code}")
