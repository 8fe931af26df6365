"""Signing the notification webhook in its two formats (COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT),
and checking its secret; no Django models, so the settings check the secret at start.

- `standard`, the default: Standard Webhooks (`webhook-id`, `webhook-timestamp`,
  `webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>`), with a secret of the
  form `whsec_<base64 key>`. Any Standard Webhooks library verifies it.
- `countersign-v1`, deprecated, kept for one release: `X-Countersign-Signature:
  sha256=<hex HMAC-SHA256 of timestamp.body>` and `X-Countersign-Timestamp`, with any secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time

from django.core.exceptions import ImproperlyConfigured

STANDARD = "standard"
LEGACY = "countersign-v1"
FORMATS = (STANDARD, LEGACY)
SECRET_PREFIX = "whsec_"
# The key sizes Standard Webhooks asks of a secret.
KEY_BYTES = (24, 64)
SIGNATURE_HEADER = "X-Countersign-Signature"
TIMESTAMP_HEADER = "X-Countersign-Timestamp"


def standard_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: `whsec_` and 24 to 64 bytes in base64."""
    setting = "COUNTERSIGN_NOTIFY_WEBHOOK_SECRET"
    if not secret.startswith(SECRET_PREFIX):
        raise ImproperlyConfigured(
            f"{setting} must be whsec_ and a base64 key for the standard webhook format"
            f' (make one: python -c \'import base64, os; print("whsec_"'
            f" + base64.b64encode(os.urandom(32)).decode())'), or set"
            f" COUNTERSIGN_NOTIFY_WEBHOOK_FORMAT={LEGACY} for the deprecated format"
        )
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error:
        raise ImproperlyConfigured(f"{setting}: what follows whsec_ is not base64") from None
    low, high = KEY_BYTES
    if not low <= len(key) <= high:
        raise ImproperlyConfigured(f"{setting}: the key is {len(key)} bytes; use {low} to {high}")
    return key


def standard_signature(*, key: bytes, webhook_id: str, timestamp: str, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def webhook_signature(*, secret: str, timestamp: str, body: bytes) -> str:
    """The deprecated format's HMAC-SHA256 over `timestamp.body`: the timestamp is signed so
    a replay can be refused."""
    signed = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def webhook_verify(
    *, secret: str, timestamp: str, body: bytes, signature: str, tolerance: int = 300
) -> bool:
    """What a receiver of the deprecated format does: constant-time compare, bounded age."""
    try:
        age = abs(time.time() - int(timestamp))
    except ValueError:
        return False
    expected = webhook_signature(secret=secret, timestamp=timestamp, body=body)
    return age <= tolerance and hmac.compare_digest(expected, signature)
