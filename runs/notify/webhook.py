"""The notification webhook: the payload as canonical JSON, POSTed and signed with
HMAC-SHA256 over `timestamp.body`, and the check a receiver makes."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid

import requests

from control.foundation.canonical import canonical_json

SIGNATURE_HEADER = "X-Countersign-Signature"
TIMESTAMP_HEADER = "X-Countersign-Timestamp"
WEBHOOK_TIMEOUT = (3.05, 10.0)


class WebhookError(Exception):
    """The webhook did not answer 2xx: not delivered, tried again later."""


def webhook_signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """HMAC-SHA256 over `timestamp.body`: the timestamp is signed so a replay can be refused."""
    signed = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def webhook_verify(
    *, secret: str, timestamp: str, body: bytes, signature: str, tolerance: int = 300
) -> bool:
    """What a receiver does (and what our tests do): constant-time compare, bounded age."""
    try:
        age = abs(time.time() - int(timestamp))
    except ValueError:
        return False
    expected = webhook_signature(secret=secret, timestamp=timestamp, body=body)
    return age <= tolerance and hmac.compare_digest(expected, signature)


def webhook_send(*, url: str, secret: str, payload: dict) -> None:
    body = canonical_json(payload)
    timestamp = str(int(time.time()))
    response = requests.post(
        url,
        data=body,
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Countersign-Notifier/1",
            "X-Countersign-Delivery": str(uuid.uuid4()),
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: webhook_signature(secret=secret, timestamp=timestamp, body=body),
        },
        timeout=WEBHOOK_TIMEOUT,
        allow_redirects=False,
    )
    if not 200 <= response.status_code < 300:
        raise WebhookError(f"webhook answered {response.status_code}")
